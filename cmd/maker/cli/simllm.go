package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/inputs"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

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
				cfg.Inputs = inputs.New(reg.js, bus.DefaultNamespace, inputs.Config{})
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
	fl.Int64Var(&cfg.RPM, "rpm", 0, "requests per minute answered, like a provider key's limit: beyond it 429 with Retry-After; x-ratelimit-* headers on every reply (0: none)")
	fl.Int64Var(&cfg.TPM, "tpm", 0, "tokens (prompt and completion) per minute answered, like a provider key's limit (0: none)")
	fl.DurationVar(&cfg.Latency, "latency", 0, "fixed latency per request")
	fl.DurationVar(&cfg.LatencyJitter, "latency-jitter", 0, "extra uniform random latency per request")
	fl.Float64Var(&cfg.TemperatureSensitivity, "temperature-sensitivity", simllm.DefaultTemperatureSensitivity, "how fast accuracy falls above temperature 0.1 (negative: off)")
	fl.StringSliceVar(&models, "model", simllmDefaultModels(), "a model served and listed by /v1/models (repeatable or comma-separated; '*' serves any name); other names get 404 model_not_found")
	fl.StringVar(&apiKey, "api-key", "", "require this bearer key")
	fl.IntVar(&cfg.WrongSpread, "wrong-spread", 0, "wrong answers of a step spread over at most N candidates (1: every wrong answer the same, the worst case MAKER's formulas assume; 0: every kind)")
	fl.StringVar(&hardSteps, "hard-steps", "", "FRACTION:ACCURACY: that share of steps is answered with that accuracy, e.g. 0.01:0.6")
	fl.StringArrayVar(&taskFiles, "task-file", nil, "a task spec to answer (repeatable), for voters sending --sim-hints")
	fl.StringVar(&natsURL, "nats", "", "answer the task specs registered with the fleet at this NATS URL (default: none)")
	cpuProfileFlag(cmd)
	return cmd
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
		topo, err := topology.Open(ctx, l.js, topology.Config{})
		if err != nil {
			l.mu.Unlock()
			return nil, fmt.Errorf("%w: %w", task.ErrUnknownTask, err)
		}
		reg = taskreg.New(topo.Tasks, builtin.Registry(), taskspec.CompileSpec)
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
