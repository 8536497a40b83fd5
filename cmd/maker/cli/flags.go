package cli

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// Flags several commands share: the NATS URL, the metrics address, and the
// simulated model and services of an in-process fleet (run, bench, up).

// natsFlag adds --nats, default $MAKER_NATS_URL.
func natsFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "nats", envOr("MAKER_NATS_URL", "nats://127.0.0.1:4222"), "NATS URL [$MAKER_NATS_URL]")
}

// metricsFlag adds a service's --metrics-addr.
func metricsFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "metrics-addr", envOr("MAKER_METRICS_ADDR", ""),
		"serve /metrics (Prometheus), /healthz and /readyz on HOST:PORT (port 0: any free port; default off) [$MAKER_METRICS_ADDR]")
}

// envOr is $name when set and not empty, else def: a flag's default.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// simFlags configure the simulated model of an in-process fleet.
type simFlags struct {
	accuracy, malformed, overlong, rateLimit, serverError float64
	latency, jitter                                       time.Duration
	http                                                  bool
	wrongSpread                                           int
	hardSteps                                             string
}

func addSimFlags(cmd *cobra.Command, s *simFlags) {
	fl := cmd.Flags()
	fl.Float64Var(&s.accuracy, "sim-accuracy", simllm.DefaultAccuracy, "simulated model: chance a valid answer is right, in (0, 1]")
	fl.Float64Var(&s.malformed, "sim-malformed-rate", 0, "simulated model: share of badly formatted answers (red-flagged)")
	fl.Float64Var(&s.overlong, "sim-overlong-rate", 0, "simulated model: share of answers cut at the token limit (red-flagged)")
	fl.Float64Var(&s.rateLimit, "sim-rate-limit-rate", 0, "simulated model: share of requests answered 429")
	fl.Float64Var(&s.serverError, "sim-server-error-rate", 0, "simulated model: share of requests answered 500")
	fl.DurationVar(&s.latency, "sim-latency", 0, "simulated model: fixed latency per call")
	fl.DurationVar(&s.jitter, "sim-latency-jitter", 0, "simulated model: extra uniform random latency per call")
	fl.IntVar(&s.wrongSpread, "sim-wrong-spread", 0, "simulated model: a step's wrong answers spread over at most N candidates (1: all the same, MAKER's worst case; 0: every kind)")
	fl.StringVar(&s.hardSteps, "sim-hard-steps", "", "simulated model: FRACTION:ACCURACY, that share of steps answered with that accuracy (e.g. 0.01:0.6)")
	fl.BoolVar(&s.http, "sim-http", false, "serve the simulated model on a loopback HTTP port (default: called in memory, through the same client)")
}

func (s *simFlags) config(seed int64) (simllm.Config, error) {
	if !(s.accuracy > 0 && s.accuracy <= 1) {
		return simllm.Config{}, usagef("--sim-accuracy %v must be in (0, 1]", s.accuracy)
	}
	cfg := simllm.Config{
		Accuracy: s.accuracy, Seed: seed, MalformedRate: s.malformed, OverlongRate: s.overlong,
		RateLimitRate: s.rateLimit, ServerErrorRate: s.serverError, Latency: s.latency, LatencyJitter: s.jitter,
		WrongSpread: s.wrongSpread,
	}
	var err error
	if cfg.HardFraction, cfg.HardAccuracy, err = parseHardSteps(s.hardSteps); err != nil {
		return simllm.Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return simllm.Config{}, usageError{err}
	}
	return cfg, nil
}

// serviceFlags point an in-process fleet at external services.
type serviceFlags struct {
	nats, redis, llmBaseURL, model, apiKey, dataDir string
	concurrency, samplesPerCall                     int
	stream, supportsN                               bool
	windows                                         windowFlags
}

func addServiceFlags(cmd *cobra.Command, s *serviceFlags) {
	fl := cmd.Flags()
	fl.StringVar(&s.nats, "nats", envOr("MAKER_NATS_URL", ""), "NATS URL (default: an embedded nats-server) [$MAKER_NATS_URL]")
	fl.StringVar(&s.redis, "redis", envOr("MAKER_REDIS_URL", ""), "Redis URL, any form maker coordinator takes (default: an embedded Redis-compatible store) [$MAKER_REDIS_URL]")
	fl.StringVar(&s.llmBaseURL, "llm-base-url", envOr("MAKER_LLM_BASE_URL", ""), "OpenAI-compatible base URL (default: the simulated model) [$MAKER_LLM_BASE_URL]")
	fl.StringVar(&s.model, "model", envOr("MAKER_MODEL", ""), "model name (required with --llm-base-url) [$MAKER_MODEL]")
	fl.StringVar(&s.apiKey, "api-key", "", "model API key (default $MAKER_LLM_API_KEY or $OPENAI_API_KEY)")
	fl.StringVar(&s.dataDir, "data-dir", "", "embedded nats-server data dir (default: a temporary dir)")
	fl.IntVar(&s.concurrency, "concurrency", 16, "samples the in-process voter works on at once")
	fl.BoolVar(&s.stream, "llm-stream", false, "ask the model for streamed replies (stream: true, usage in the last chunk)")
	fl.IntVar(&s.samplesPerCall, "samples-per-call", schemas.MaxSamplesPerCall, "samples of a wave asked in one request, their answers in as few messages as they come (1: a message a sample): each at its own temperature and seed; with --llm-supports-n, those of one temperature (above 0) in one call with n, the prompt paid once")
	fl.BoolVar(&s.supportsN, "llm-supports-n", false, "the model answers n > 1 with n choices (the simulated model does): a request's samples of one temperature are drawn in one call, the prompt paid once; off, each is drawn alone with its own seed, so the trace is the same whatever --samples-per-call")
	addWindowFlags(cmd, &s.windows, windowsKept)
}

func (s *serviceFlags) options(sim simllm.Config, log *slog.Logger) (fleetOptions, error) {
	if s.llmBaseURL != "" && s.model == "" {
		return fleetOptions{}, usagef("--model is required with --llm-base-url")
	}
	if s.concurrency < 1 {
		return fleetOptions{}, usagef("--concurrency must be >= 1, got %d", s.concurrency)
	}
	if s.samplesPerCall < 1 || s.samplesPerCall > schemas.MaxSamplesPerCall {
		return fleetOptions{}, usagef("--samples-per-call must be between 1 and %d, got %d", schemas.MaxSamplesPerCall, s.samplesPerCall)
	}
	var windows topology.Config
	if err := s.windows.set(&windows); err != nil {
		return fleetOptions{}, err
	}
	key := s.apiKey
	if key == "" {
		key = apiKeyFromEnv()
	}
	return fleetOptions{
		natsURL: s.nats, redisURL: s.redis, llmBaseURL: s.llmBaseURL, apiKey: key, model: s.model,
		dataDir: s.dataDir, sim: sim, concurrency: s.concurrency, stream: s.stream, log: log,
		samplesPerCall: s.samplesPerCall, supportsN: s.supportsN,
		workDuplicates: windows.WorkDuplicates, journalDuplicates: windows.JournalDuplicates,
	}, nil
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
