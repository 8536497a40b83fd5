package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	"github.com/makerfleet/makerfleet/voter"
)

func natsFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "nats", envOr("MAKER_NATS_URL", "nats://127.0.0.1:4222"), "NATS URL [$MAKER_NATS_URL]")
}

func simllmCmd(e *env) *cobra.Command {
	var (
		addr, logPath, apiKey string
		models                []string
		cfg                   simllm.Config
		retryAfter            time.Duration
		natsURL, hardSteps    string
		taskFiles             []string
	)
	cmd := &cobra.Command{
		Use:   "simllm",
		Short: "Serve the simulated OpenAI-compatible model (answers hanoi prompts with a set accuracy)",
		Long: `simllm serves /v1/chat/completions and /v1/models like an OpenAI-compatible server.
It reads hanoi step prompts and answers correctly with probability --accuracy (lower
above temperature 0.1, and a request without a temperature counts as 1.0), otherwise a
wrong but well-formed answer. Answers are a function of --seed and the request (its
seed, messages, temperature), never of arrival order. Fault rates inject malformed and
over-long answers, 429s with Retry-After, 500s and latency. GET /sim/stats counts calls.
It streams (stream: true) as OpenAI does, and answers only the --model names (default:
sim-1 and the judge's default models; '*' for any), others with 404 model_not_found.

It also answers the steps of task specs, from the spec's reference answer with the same
accuracy, when a voter started with --sim-hints says which step a request is: the
specs come from --task-file files, or from a fleet's task registry (--nats).
--wrong-spread and --hard-steps shape its errors (docs/tasks.md).`,
		Example: `  maker simllm --addr 127.0.0.1:8080 --accuracy 0.9 --seed 7 --log-requests requests.jsonl
  maker simllm --accuracy 0.99 --wrong-spread 1 --hard-steps 0.01:0.6 --nats nats://127.0.0.1:4222`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := e.logger(slog.LevelInfo)
			if cmd.Flags().Changed("accuracy") && !(cfg.Accuracy > 0 && cfg.Accuracy <= 1) {
				return usagef("--accuracy %v must be in (0, 1]", cfg.Accuracy)
			}
			var err error
			cfg.APIKey = apiKey
			cfg.Model, cfg.Models = simllmModels(models)
			cfg.RetryAfter = retryAfter
			if retryAfter == 0 {
				cfg.RetryAfter = simllm.NoRetryAfter
			}
			if logPath != "" {
				f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					return usagef("--log-requests: %v", err)
				}
				defer f.Close()
				cfg.LogRequests = f
			}
			if cfg.HardFraction, cfg.HardAccuracy, err = parseHardSteps(hardSteps); err != nil {
				return err
			}
			ctx := cmd.Context()
			tasks := builtinTasks()
			for _, file := range taskFiles {
				_, t, err := readSpec(file)
				if err != nil {
					return err
				}
				tasks.Add(t)
			}
			if natsURL != "" {
				// The fleet's registry is found when a request first needs
				// it: the model may start before any coordinator has made
				// the topology.
				nc, err := bus.Connect(natsURL, "maker-simllm", natsAuth(cmd.Context()))
				if err != nil {
					return err
				}
				defer nc.Close()
				reg, err := newLazyRegistry(nc)
				if err != nil {
					return err
				}
				cfg.Tasks = fallbackSource{tasks, reg}
			} else {
				cfg.Tasks = tasks
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			rn, err := simllm.Start(ctx, addr, cfg)
			if err != nil {
				return err
			}
			log.Info("simulated model listening", "url", rn.URL(), "accuracy", cfg.Accuracy, "seed", cfg.Seed)
			fmt.Fprintf(e.stderr, "simllm listening on %s\n", rn.URL())
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = rn.Close(sctx)
			st, _ := json.Marshal(rn.Stats())
			log.Info("simulated model stopped", "stats", string(st))
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", "127.0.0.1:8080", "listen address HOST:PORT")
	fl.Float64Var(&cfg.Accuracy, "accuracy", simllm.DefaultAccuracy, "chance a valid answer is right at temperature <= 0.1, in (0, 1]")
	fl.Int64Var(&cfg.Seed, "seed", 1, "seed: answers are a function of it and the request")
	fl.StringVar(&logPath, "log-requests", "", "append each chat-completions request body to FILE, one compact JSON line each (temperature null when left out)")
	fl.Float64Var(&cfg.MalformedRate, "malformed-rate", 0, "share of badly formatted answers")
	fl.Float64Var(&cfg.OverlongRate, "overlong-rate", 0, "share of answers cut at the token limit (finish_reason length)")
	fl.Float64Var(&cfg.RateLimitRate, "rate-limit-rate", 0, "share of requests answered 429")
	fl.DurationVar(&retryAfter, "retry-after", time.Second, "Retry-After sent with 429s (0: none)")
	fl.Float64Var(&cfg.ServerErrorRate, "server-error-rate", 0, "share of requests answered 500")
	fl.DurationVar(&cfg.Latency, "latency", 0, "fixed latency per request")
	fl.DurationVar(&cfg.LatencyJitter, "latency-jitter", 0, "extra uniform random latency per request")
	fl.Float64Var(&cfg.TemperatureSensitivity, "temperature-sensitivity", simllm.DefaultTemperatureSensitivity, "how fast accuracy falls above temperature 0.1 (negative: off)")
	fl.StringSliceVar(&models, "model", simllmDefaultModels(), "a model served and listed by /v1/models (repeatable or comma-separated; '*' serves any name); other names get 404 model_not_found")
	fl.StringVar(&apiKey, "api-key", "", "require this bearer key")
	fl.IntVar(&cfg.WrongSpread, "wrong-spread", 0, "wrong answers of a step spread over at most N candidates (1: every wrong answer the same, the worst case MAKER's formulas assume; 0: every kind)")
	fl.StringVar(&hardSteps, "hard-steps", "", "FRACTION:ACCURACY: that share of steps is answered with that accuracy, e.g. 0.01:0.6")
	fl.StringArrayVar(&taskFiles, "task-file", nil, "a task spec to answer (repeatable), for voters sending --sim-hints")
	fl.StringVar(&natsURL, "nats", "", "answer the task specs registered with the fleet at this NATS URL (default: none)")
	return cmd
}

func coordinatorCmd(e *env) *cobra.Command {
	var (
		natsURL, redisURL, id, crashAt     string
		metricsAddr                        string
		maxJobs, checkpointEvery, replicas int
		leaseTTL, slice                    time.Duration
		retentionInterval                  time.Duration // purge.go
		arbReserve                         float64
	)
	cmd := &cobra.Command{
		Use:     "coordinator",
		Short:   "Run a coordinator: takes jobs from NATS, drives their steps, tallies votes in Redis",
		Example: `  maker coordinator --nats nats://127.0.0.1:4222 --redis redis://127.0.0.1:6379/0`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if maxJobs < 1 {
				return usagef("--max-jobs must be >= 1")
			}
			if replicas < 1 || replicas > 5 {
				return usagef("--replicas must be 1..5")
			}
			if !(arbReserve > 0 && arbReserve <= schemas.MaxBudgetUSD) {
				return usagef("--arbitration-reserve-usd %v must be above 0 and at most %d", arbReserve, schemas.MaxBudgetUSD)
			}
			if crashAt != "" {
				if _, _, err := coordinator.ParseCrashAt(crashAt); err != nil {
					return usageError{err}
				}
			}
			log := e.logger(slog.LevelInfo)
			// One parser for every --redis: a server, TLS, Cluster or
			// Sentinel (store.ParseRedisURL); errors show it redacted.
			rdb, ropts, err := store.NewRedisClient(redisURL)
			if err != nil {
				return usagef("--redis: %v", err)
			}
			defer rdb.Close()
			// One clear error naming the server, before anything starts.
			pctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			err = rdb.Ping(pctx).Err()
			cancel()
			if err != nil {
				if ropts.Mode != store.ModeSingle {
					return fmt.Errorf("redis (%s) at %s: %w", ropts.Mode, ropts.Redacted, err)
				}
				return fmt.Errorf("redis at %s: %w", ropts.Redacted, err)
			}
			nc, err := bus.Connect(natsURL, connName("coordinator", id), natsAuth(cmd.Context()))
			if err != nil {
				return err
			}
			defer nc.Close()
			st, err := store.New(rdb, store.Config{})
			if err != nil {
				return err
			}
			reg := newRoleMetrics(metricsAddr, "coordinator")
			var met *metrics.Coordinator
			if reg != nil {
				met = metrics.NewCoordinator(reg)
			}
			var crash func(string)
			if crashAt != "" {
				crash = func(string) { os.Exit(137) } // what a SIGKILL leaves
			}
			c, err := coordinator.New(nc, st, coordinator.Config{
				ID: id, Tasks: builtin.Registry(), MaxJobs: maxJobs, Logger: log,
				LeaseTTL: leaseTTL, CheckpointEvery: checkpointEvery, CrashAt: crashAt, Crash: crash, Slice: slice, RetentionInterval: retentionInterval,
				ArbitrationReserveUSD: arbReserve,
				Bus:                   bus.Config{Replicas: replicas, Logger: log}, Metrics: met,
			})
			if err != nil {
				return usageError{err}
			}
			stopMetrics, err := startRoleMetrics(cmd.Context(), e, log, metricsAddr, reg, nc, rdb)
			if err != nil {
				return err
			}
			defer stopMetrics()
			return c.Run(cmd.Context())
		},
	}
	natsFlag(cmd, &natsURL)
	cmd.Flags().StringVar(&redisURL, "redis", envOr("MAKER_REDIS_URL", "redis://127.0.0.1:6379/0"),
		"Redis URL: redis://[USER:PASS@]HOST:PORT/DB, rediss:// for TLS (options tls_ca, tls_cert, tls_key), redis+cluster://HOST:PORT,HOST:PORT,... for Redis Cluster, redis+sentinel://HOST:26379,.../MASTER/DB for Sentinel [$MAKER_REDIS_URL]")
	cmd.Flags().IntVar(&maxJobs, "max-jobs", 16, "jobs this coordinator runs at once")
	cmd.Flags().StringVar(&id, "id", "", "coordinator id, unique in the fleet (default coordinator-host-pid)")
	cmd.Flags().DurationVar(&leaseTTL, "lease-ttl", 10*time.Second, "a job whose coordinator stops renewing its lease is taken over after this long")
	cmd.Flags().DurationVar(&slice, "slice", 30*time.Second, "when full, hand a job back (at a step boundary) after it ran this long if another tenant's job waits (negative: never)")
	cmd.Flags().DurationVar(&retentionInterval, "retention-interval", 10*time.Minute, "sweep finished work past its retention policy (maker retention) this often, one coordinator at a time (negative: never)")
	cmd.Flags().IntVar(&checkpointEvery, "checkpoint-every", 1000, "steps between checkpoints (a resume reads at most this many journal entries)")
	cmd.Flags().IntVar(&replicas, "replicas", 1, "replicas of the streams and buckets this coordinator creates (3 on a clustered nats-server)")
	cmd.Flags().Float64Var(&arbReserve, "arbitration-reserve-usd", 1, "what a job under a budget or a spend quota holds for an arbitration of the judge's panel, in USD; the judge spends no more, and a job that cannot hold it gets a person instead")
	metricsFlag(cmd, &metricsAddr)
	cmd.Flags().StringVar(&crashAt, "crash-at", "", "fault injection for the fault suite: exit as if killed at <point>:<step>")
	_ = cmd.Flags().MarkHidden("crash-at")
	tracingFlags(e, cmd, "coordinator")
	return cmd
}

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
				log.Warn("the model server does not list the model; samples fail if it does not serve it either",
					"llm_base_url", baseURL, "model", model, "err", err)
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
			stopMetrics, err := startRoleMetrics(cmd.Context(), e, log, metricsAddr, reg, nc, nil)
			if err != nil {
				return err
			}
			defer stopMetrics()
			v, err := voter.New(nc, client, voter.Config{ID: id, Tasks: builtin.Registry(), Model: model, Metrics: met,
				Concurrency: concurrency, DrainTimeout: drain, Logger: log, SimHints: simHints, Policy: policy,
				// The topology is the coordinators' to create, with their
				// --replicas: a voter started first waits for it.
				Bus: bus.Config{Await: true, Logger: log}})
			if err != nil {
				return usageError{err}
			}
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

// parseHardSteps reads --hard-steps FRACTION:ACCURACY ("" for none).
func parseHardSteps(s string) (fraction, accuracy float64, err error) {
	if s == "" {
		return 0, 0, nil
	}
	f, a, ok := strings.Cut(s, ":")
	fraction, err1 := strconv.ParseFloat(f, 64)
	accuracy, err2 := strconv.ParseFloat(a, 64)
	if !ok || err1 != nil || err2 != nil || !(fraction > 0 && fraction <= 1) || !(accuracy > 0 && accuracy <= 1) {
		return 0, 0, usagef("hard steps %q: want FRACTION:ACCURACY, both in (0, 1], e.g. 0.01:0.6", s)
	}
	return fraction, accuracy, nil
}

// fallbackSource finds a task in first, then in second.
type fallbackSource struct{ first, second task.Source }

// lazyRegistry is the task registry of the fleet on nc, opened on first
// use and again after a failure (no topology yet): the bucket is never
// created here.
type lazyRegistry struct {
	js  jetstream.JetStream
	mu  sync.Mutex
	reg *taskreg.Registry
}

func newLazyRegistry(nc *nats.Conn) (*lazyRegistry, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &lazyRegistry{js: js}, nil
}

func (l *lazyRegistry) Task(ctx context.Context, ref task.Ref) (task.Task, error) {
	l.mu.Lock()
	reg := l.reg
	if reg == nil {
		topo, err := bus.Open(ctx, l.js, bus.Config{})
		if err != nil {
			l.mu.Unlock()
			return nil, fmt.Errorf("%w: %w", task.ErrUnknownTask, err)
		}
		reg = taskreg.New(topo.Tasks, builtin.Registry())
		l.reg = reg
	}
	l.mu.Unlock()
	return reg.Task(ctx, ref)
}

func (s fallbackSource) Task(ctx context.Context, ref task.Ref) (task.Task, error) {
	t, err := s.first.Task(ctx, ref)
	if err == nil {
		return t, nil
	}
	return s.second.Task(ctx, ref)
}
