package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/providers"
	"github.com/makerfleet/makerfleet/internal/ratelimit"
	"github.com/makerfleet/makerfleet/internal/store"
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
		// Instead of --llm-base-url: the deployments of a providers file,
		// or of the fleet's registry (--providers); limitsRedis shares
		// their limits.
		providersFile, limitsRedis     string
		concurrency, maxAttempts       int
		attemptTimeout, drain, linger  time.Duration
		simHints, llmStream, supportsN bool
		useRegistry                    bool // --providers: the fleet's registry
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
				{"llm-stream", "MAKER_LLM_STREAM"}, {"providers-file", "MAKER_PROVIDERS_FILE"},
				{"limits-redis", "MAKER_LIMITS_REDIS_URL"}, {"providers", "MAKER_PROVIDERS"},
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
			case linger < 0 || linger > voter.MaxResultLinger:
				return usagef("--result-linger must be between 0 and %s, got %s", voter.MaxResultLinger, linger)
			}
			resultLinger := linger
			if linger == 0 {
				resultLinger = -1 // none: the config's zero is its default
			}
			switch {
			case baseURL != "" && (providersFile != "" || limitsRedis != "" || useRegistry):
				return usagef("--llm-base-url calls one server; --providers, --providers-file and --limits-redis are for deployments (leave --llm-base-url out)")
			case baseURL == "" && providersFile == "" && !useRegistry:
				return usagef("--llm-base-url is required (or --providers to call the fleet's deployments, maker providers; or --providers-file FILE)")
			case useRegistry && providersFile != "":
				return usagef("give --providers (the fleet's registry) or --providers-file, not both")
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
			// Kept without --metrics-addr too: the presence record reports
			// its provider errors and 429s (maker fleet).
			met := metrics.NewVoter(cmp.Or(reg, metrics.NewRegistry("voter", Version)))
			tmpl := llm.Config{Stream: llmStream,
				AttemptTimeout: attemptTimeout, MaxAttempts: maxAttempts, BadResponseAttempts: badReplies,
				OnRetry: func(ev llm.RetryEvent) {
					met.ModelError(model, ev.Err) // a failed attempt, retried
					log.Debug("model call retry", "attempt", ev.Attempt, "delay", ev.Delay, "err", ev.Err)
				}}
			var (
				m     voter.Model
				ready []metrics.Check
				deps  func() []string // the deployments, for the presence record
			)
			if baseURL != "" {
				cfg := tmpl
				cfg.BaseURL, cfg.APIKey, cfg.Model = baseURL, apiKey, model
				client, err := llm.New(cfg)
				if err != nil {
					return usageError{err}
				}
				defer client.Close()
				if err := checkModelServer(cmd.Context(), log, client, baseURL, model); err != nil {
					return err
				}
				m = client
			}
			nc, err := bus.Connect(natsURL, connName("voter", id), natsAuth(cmd.Context()))
			if err != nil {
				return err
			}
			defer nc.Close()
			if baseURL == "" {
				router, stop, err := startRouter(cmd.Context(), log, nc, routerOptions{model: model, file: providersFile, limitsRedis: limitsRedis, llm: tmpl})
				if err != nil {
					return err
				}
				defer stop()
				m = router
				deps = func() []string {
					var names []string
					for _, s := range router.Status() {
						names = append(names, s.Name)
					}
					return names
				}
				// /readyz fails while no deployment can serve the voter's model.
				ready = append(ready, metrics.Check{Name: "deployments", Fn: func(context.Context) error { return router.Ready() }})
			}
			v, err := voter.New(nc, m, voter.Config{ID: id, Tasks: builtin.Registry(), Model: model, Metrics: met,
				Concurrency: concurrency, DrainTimeout: drain, ResultLinger: resultLinger, Logger: log, SimHints: simHints, Policy: policy, SupportsN: supportsN,
				Build: Version, Deployments: deps,
				// The topology is the coordinators' to create, with their
				// --replicas: a voter started first waits for it.
				Bus: topology.Config{Await: true, Logger: log}})
			if err != nil {
				return usageError{err}
			}
			// /readyz fails while the provider refuses the key or a model.
			ready = append(ready, metrics.Check{Name: "model", Fn: func(context.Context) error { return v.Ready() }})
			stopMetrics, err := startRoleMetrics(cmd.Context(), e, log, metricsAddr, reg, nc, nil, ready...)
			if err != nil {
				return err
			}
			defer stopMetrics()
			return v.Run(cmd.Context())
		},
	}
	natsFlag(cmd, &natsURL)
	fl := cmd.Flags()
	fl.StringVar(&baseURL, "llm-base-url", envOr("MAKER_LLM_BASE_URL", ""),
		"OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1; or --providers / --providers-file for deployments [$MAKER_LLM_BASE_URL]")
	fl.BoolVar(&useRegistry, "providers", false, "call the models through the fleet's provider registry (maker providers) instead of one --llm-base-url [$MAKER_PROVIDERS]")
	fl.StringVar(&providersFile, "providers-file", "", `deployments to call instead of the fleet's registry ({"deployments": [...]}, as maker providers list --json prints) [$MAKER_PROVIDERS_FILE]`)
	fl.StringVar(&limitsRedis, "limits-redis", "", "Redis URL where every voter shares the deployments' requests and tokens per minute (a Redis user limited to ~maker:rl:*; unset: each voter learns limits from 429s alone) [$MAKER_LIMITS_REDIS_URL]")
	fl.StringVar(&model, "model", envOr("MAKER_MODEL", ""), "model name [$MAKER_MODEL]")
	fl.StringVar(&apiKey, "api-key", "", "model API key (default $MAKER_LLM_API_KEY or $OPENAI_API_KEY)")
	fl.IntVar(&concurrency, "concurrency", 8, "samples this voter works on at once")
	fl.IntVar(&maxAttempts, "max-attempts", llm.DefaultMaxAttempts, "model call attempts per sample (429, 5xx and timeouts are retried with backoff)")
	fl.BoolVar(&supportsN, "supports-n", false, "the --llm-base-url model answers n > 1 with n choices: a request asking several samples is drawn in one call (on deployments, each one's supports_n decides)")
	fl.BoolVar(&llmStream, "llm-stream", false, "ask the model for streamed replies (stream: true, usage in the last chunk) and join them [$MAKER_LLM_STREAM]")
	fl.DurationVar(&attemptTimeout, "attempt-timeout", llm.DefaultAttemptTimeout, "timeout of one model call attempt")
	fl.DurationVar(&linger, "result-linger", voter.DefaultResultLinger,
		"how long the answers of a request asking several samples (a wave) wait, once one is ready, for the others, so they go in one message; a slow call holds the others back at most this long (0: none, each goes once ready; at most 1s)")
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
	cpuProfileFlag(cmd)
	return cmd
}

// checkModelServer checks a voter's one model server at start: a server
// that cannot be reached, or refuses the model to the key, fails the
// voter now, not every sample it would take; one that does not list the
// model may still answer it.
func checkModelServer(ctx context.Context, log *slog.Logger, client *llm.Client, baseURL, model string) error {
	cctx, cancel := context.WithTimeout(ctx, modelCheckTimeout)
	err := client.Check(cctx)
	cancel()
	switch {
	case errors.Is(err, llm.ErrModelNotListed):
		// Not listed (some servers list nothing, or other names): ask the
		// model for one token before taking samples.
		pctx, cancel := context.WithTimeout(ctx, modelCheckTimeout)
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
	return nil
}

// routerOptions are a voter's deployments: a file, or the registry.
type routerOptions struct {
	model, file, limitsRedis string
	llm                      llm.Config
}

// startRouter makes the voter's model a router over its deployments (a
// providers file, or the fleet's registry, watched), with the fleet-wide
// limits in Redis when given, and checks the deployments of its own
// model: a voter none of whose deployments serves it does not start.
// stop ends the watch and closes the clients.
func startRouter(ctx context.Context, log *slog.Logger, nc *nats.Conn, o routerOptions) (_ *providers.Router, stop func(), err error) {
	var stops []func()
	cleanup := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	var src providers.Source
	where := "the fleet's registry (maker providers list)"
	if o.file != "" {
		ds, err := providers.ReadFile(o.file)
		if err != nil {
			return nil, nil, usageError{err}
		}
		src, where = providers.StaticSource(ds), o.file
	} else {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, nil, err
		}
		topo, err := topology.Ensure(ctx, js, topology.Config{Await: true, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		mirror := providers.NewMirror(topo.Providers)
		mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stops = append(stops, func() { cancel(); mirror.Wait() })
		if err := mirror.Start(mctx); err != nil {
			return nil, nil, err
		}
		src = providers.MirrorSource(mirror)
	}
	var limiter *ratelimit.Limiter
	if o.limitsRedis != "" {
		rdb, _, err := store.NewRedisClient(o.limitsRedis)
		if err != nil {
			return nil, nil, usagef("--limits-redis: %v", err)
		}
		stops = append(stops, func() { _ = rdb.Close() })
		pctx, cancel := context.WithTimeout(ctx, modelCheckTimeout)
		err = rdb.Ping(pctx).Err()
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("--limits-redis %s: %w", store.RedactURL(o.limitsRedis), err)
		}
		if limiter, err = ratelimit.New(rdb, ratelimit.Config{}); err != nil {
			return nil, nil, err
		}
	}
	router, err := providers.NewRouter(providers.Config{Model: o.model, Source: src, Limiter: limiter, LLM: o.llm, Logger: log})
	if err != nil {
		return nil, nil, usageError{err}
	}
	stops = append(stops, router.Close)

	// Its own model's deployments, checked from here (where the keys are).
	ds, _ := src()
	var own, failed []string
	for _, d := range ds {
		if d.Model != o.model || d.Disabled {
			continue
		}
		own = append(own, d.Name)
		cctx, cancel := context.WithTimeout(ctx, modelCheckTimeout)
		res := providers.Check(cctx, d, providers.KeySource{}, llm.Config{MaxAttempts: 1, AttemptTimeout: modelCheckTimeout})
		cancel()
		if res.OK {
			log.Info("deployment serves the voter's model", "deployment", d.Name, "model", d.Model, "base_url", d.BaseURL, "detail", res.Detail)
			continue
		}
		failed = append(failed, d.Name+": "+res.Detail)
		log.Warn("deployment does not serve the voter's model; it is left out until a call succeeds", "deployment", d.Name, "model", d.Model, "err", res.Err)
	}
	switch {
	case len(own) == 0:
		return nil, nil, fmt.Errorf("%w: %q in %s: maker providers set NAME --base-url URL --model %s", providers.ErrNoDeployment, o.model, where, o.model)
	case len(failed) == len(own):
		return nil, nil, fmt.Errorf("no deployment serves %q to this voter: %s", o.model, strings.Join(failed, "; "))
	}
	log.Info("voter calls models through deployments", "source", where, "deployments", len(ds), "of_its_model", len(own), "fleet_limits", limiter != nil)
	return router, cleanup, nil
}
