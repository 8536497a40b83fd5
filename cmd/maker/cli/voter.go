package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/task/builtin"
	"github.com/makerfleet/makerfleet/voter"
)

// modelCheckTimeout bounds the voter's start-up check of its model server.
const modelCheckTimeout = 15 * time.Second

func voterCmd(e *env) *cobra.Command {
	var (
		natsURL, baseURL, model, apiKey, id string
		metricsAddr                         string
		concurrency, maxAttempts            int
		attemptTimeout, drain               time.Duration
		simHints, llmStream                 bool
		// policy bounds what a sample request may ask of the model;
		// badReplies is the model client's BadResponseAttempts.
		policy     voter.Policy
		badReplies int
	)
	cmd := &cobra.Command{
		Use:     "voter",
		Short:   "Run a voter: pulls sample requests from NATS, calls the model, answers with votes",
		Example: `  maker voter --nats nats://127.0.0.1:4222 --llm-base-url http://127.0.0.1:8080/v1 --model sim-1 --concurrency 16`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The policy flags' variables, for a flag not given.
			for _, f := range []struct{ flag, env string }{
				{"allow-model", "MAKER_ALLOW_MODELS"}, {"max-tokens-ceiling", "MAKER_MAX_TOKENS_CEILING"},
				{"temperature-max", "MAKER_TEMPERATURE_MAX"}, {"bad-reply-attempts", "MAKER_BAD_REPLY_ATTEMPTS"},
				{"llm-stream", "MAKER_LLM_STREAM"},
			} {
				if v := os.Getenv(f.env); v != "" && !cmd.Flags().Changed(f.flag) {
					if err := cmd.Flags().Set(f.flag, v); err != nil {
						return usagef("$%s: %v", f.env, err)
					}
				}
			}
			switch {
			case policy.MaxTokensCeiling < 1:
				return usagef("--max-tokens-ceiling must be >= 1, got %d", policy.MaxTokensCeiling)
			case !(policy.TemperatureMax > 0 && policy.TemperatureMax <= 2):
				return usagef("--temperature-max must be above 0 and at most 2, got %v", policy.TemperatureMax)
			case badReplies < 1:
				return usagef("--bad-reply-attempts must be >= 1, got %d", badReplies)
			}
			if baseURL == "" {
				return usagef("--llm-base-url is required")
			}
			if model == "" {
				return usagef("--model is required")
			}
			if concurrency < 1 {
				return usagef("--concurrency must be >= 1, got %d", concurrency)
			}
			if apiKey == "" {
				apiKey = apiKeyFromEnv()
			}
			log := e.logger(slog.LevelInfo)
			reg := newRoleMetrics(metricsAddr, "voter")
			var met *metrics.Voter
			if reg != nil {
				met = metrics.NewVoter(reg)
			}
			client, err := llm.New(llm.Config{BaseURL: baseURL, APIKey: apiKey, Model: model, Stream: llmStream,
				AttemptTimeout: attemptTimeout, MaxAttempts: maxAttempts, BadResponseAttempts: badReplies,
				OnRetry: func(ev llm.RetryEvent) {
					met.ModelError(model, ev.Err) // a failed attempt, retried
					log.Debug("model call retry", "attempt", ev.Attempt, "delay", ev.Delay, "err", ev.Err)
				}})
			if err != nil {
				return usageError{err}
			}
			defer client.Close()
			// A model that cannot be reached fails the voter now, not every
			// sample it would take; one that is not listed may still answer.
			cctx, cancel := context.WithTimeout(cmd.Context(), modelCheckTimeout)
			err = client.Check(cctx)
			cancel()
			switch {
			case errors.Is(err, llm.ErrModelNotListed):
				// Not listed (some servers list nothing, or other names):
				// ask the model for one token before taking samples.
				pctx, cancel := context.WithTimeout(cmd.Context(), modelCheckTimeout)
				perr := client.Probe(pctx)
				cancel()
				if errors.Is(perr, llm.ErrProvider) {
					return fmt.Errorf("model server %s does not serve %q to this key: %w (and %w)", baseURL, model, perr, err)
				}
				if perr == nil {
					log.Info("the model server does not list the model but answers it", "llm_base_url", baseURL, "model", model, "listed", err)
				} else {
					log.Warn("the model server does not list the model and could not be asked; samples are handed back if it does not serve it",
						"llm_base_url", baseURL, "model", model, "err", err, "probe_err", perr)
				}
			case err != nil:
				return fmt.Errorf("model server %s: GET /models: %w", baseURL, err)
			default:
				log.Info("model server answers", "llm_base_url", baseURL, "model", model)
			}
			nc, err := bus.Connect(natsURL, connName("voter", id), natsAuth(cmd.Context()))
			if err != nil {
				return err
			}
			defer nc.Close()
			v, err := voter.New(nc, client, voter.Config{ID: id, Tasks: builtin.Registry(), Model: model, Metrics: met,
				Concurrency: concurrency, DrainTimeout: drain, Logger: log, SimHints: simHints, Policy: policy,
				// The topology is the coordinators' to create, with their
				// --replicas: a voter started first waits for it.
				Bus: topology.Config{Await: true, Logger: log}})
			if err != nil {
				return usageError{err}
			}
			// /readyz fails while the provider refuses the key or a model.
			stopMetrics, err := startRoleMetrics(cmd.Context(), e, log, metricsAddr, reg, nc, nil,
				metrics.Check{Name: "model", Fn: func(context.Context) error { return v.Ready() }})
			if err != nil {
				return err
			}
			defer stopMetrics()
			return v.Run(cmd.Context())
		},
	}
	natsFlag(cmd, &natsURL)
	fl := cmd.Flags()
	fl.StringVar(&baseURL, "llm-base-url", envOr("MAKER_LLM_BASE_URL", ""), "OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1 [$MAKER_LLM_BASE_URL]")
	fl.StringVar(&model, "model", envOr("MAKER_MODEL", ""), "model name [$MAKER_MODEL]")
	fl.StringVar(&apiKey, "api-key", "", "model API key (default $MAKER_LLM_API_KEY or $OPENAI_API_KEY)")
	fl.IntVar(&concurrency, "concurrency", 8, "samples this voter works on at once")
	fl.IntVar(&maxAttempts, "max-attempts", llm.DefaultMaxAttempts, "model call attempts per sample (429, 5xx and timeouts are retried with backoff)")
	fl.BoolVar(&llmStream, "llm-stream", false, "ask the model for streamed replies (stream: true, usage in the last chunk) and join them [$MAKER_LLM_STREAM]")
	fl.DurationVar(&attemptTimeout, "attempt-timeout", llm.DefaultAttemptTimeout, "timeout of one model call attempt")
	fl.DurationVar(&drain, "drain-timeout", 30*time.Second, "on SIGTERM, time to finish samples in hand before handing them back")
	fl.StringVar(&id, "id", "", "voter id (default voter-host-pid)")
	metricsFlag(cmd, &metricsAddr)
	fl.BoolVar(&simHints, "sim-hints", false, "tell the model which task step each request is (for maker simllm answering task specs; never for a real model)")
	fl.StringSliceVar(&policy.AllowModels, "allow-model", nil,
		"a model sample requests may name besides --model (a job's --stronger-model); repeatable or comma-separated; '*' allows any (trusted fleets only) [$MAKER_ALLOW_MODELS]")
	fl.IntVar(&policy.MaxTokensCeiling, "max-tokens-ceiling", voter.DefaultMaxTokensCeiling,
		"largest max_output_tokens a sample request may ask for; larger ones are refused (red flag policy) [$MAKER_MAX_TOKENS_CEILING]")
	fl.Float64Var(&policy.TemperatureMax, "temperature-max", voter.DefaultTemperatureMax,
		"highest temperature a sample request may ask for; hotter ones are refused (red flag policy) [$MAKER_TEMPERATURE_MAX]")
	fl.IntVar(&badReplies, "bad-reply-attempts", llm.DefaultBadResponseAttempts,
		"tries of a sample whose model reply is unusable (HTTP 200 with no choice, not JSON, usage out of range) before it is answered as the red flag empty [$MAKER_BAD_REPLY_ATTEMPTS]")
	tracingFlags(e, cmd, "voter")
	return cmd
}
