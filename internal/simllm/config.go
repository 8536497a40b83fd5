package simllm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/task"
)

// Defaults applied to zero-valued Config fields, and fixed limits.
const (
	DefaultAccuracy               = 0.95
	DefaultTemperatureSensitivity = 0.5
	DefaultRetryAfter             = time.Second
	DefaultModel                  = "sim-1"
	// AnyModel in Config.Models serves every model name (not listed).
	AnyModel = "*"

	// NoRetryAfter as Config.RetryAfter sends 429s without Retry-After.
	NoRetryAfter time.Duration = -1

	// MaxBodyBytes is the largest request body; larger ones get 413.
	MaxBodyBytes = 4 << 20
	// MaxN is the largest n a request may ask for.
	MaxN = 16
	// MaxOutputTokens is the model's output limit; a larger max_tokens is
	// rejected, as OpenAI does.
	MaxOutputTokens = 16384
	// OverlongTokens is how far an overlong reply runs when the request sets
	// no token limit: far beyond the paper's 750-token red flag.
	OverlongTokens = 4096
)

// Config configures a Server. Zero values take the documented defaults.
type Config struct {
	// Accuracy is the chance a valid answer is right at temperature <= 0.1.
	// Default 0.95 (0 means default); must be in [0, 1].
	Accuracy float64
	// Seed makes answers and transport faults reproducible. Default 0.
	Seed int64
	// MalformedRate is the share of answers that fail the strict parser.
	MalformedRate float64
	// OverlongRate is the share of answers that run to the token limit.
	// MalformedRate + OverlongRate must be <= 1.
	OverlongRate float64
	// RateLimitRate is the share of requests answered 429.
	RateLimitRate float64
	// RetryAfter is sent with 429s: Retry-After in whole seconds (rounded
	// up) and retry-after-ms exactly. Default 1s; NoRetryAfter (any negative
	// value) sends neither header.
	RetryAfter time.Duration
	// RPM and TPM limit the requests and the tokens (prompt and
	// completion) per minute the server answers, as a provider's key is
	// limited (limits.go): beyond them it answers 429 with Retry-After,
	// and every chat reply carries x-ratelimit-limit-*, -remaining-* and
	// -reset-* headers. 0: no limit.
	RPM, TPM int64
	// Now is the limits' clock. Test hook; default time.Now.
	Now func() time.Time
	// ServerErrorRate is the share of requests answered 500.
	// RateLimitRate + ServerErrorRate must be <= 1.
	ServerErrorRate float64
	// Latency is added to every answered request; LatencyJitter adds a
	// uniform [0, LatencyJitter). The wait ends early if the client leaves.
	Latency, LatencyJitter time.Duration
	// TemperatureSensitivity is how fast accuracy falls above temperature
	// 0.1 (see the package comment). Default 0.5; negative turns it off.
	TemperatureSensitivity float64
	// Model is the first id /v1/models lists. Default "sim-1".
	Model string
	// Models are the ids served besides Model (a stronger model, a judge's
	// panel); /v1/models lists them after Model. With Models empty the
	// server answers a request for any model (tests name models freely);
	// with Models set, a request for a model that is neither Model nor in
	// Models gets 404 model_not_found, as OpenAI answers, unless Models
	// holds AnyModel. The "@fault" suffixes of breakglass.go are not part of
	// the name checked: serving "m1" serves "m1@fail". The response echoes
	// the model requested.
	Models []string
	// APIKey, if set, must come as "Authorization: Bearer <key>" on /v1
	// endpoints, else 401.
	APIKey string
	// WrongSpread bounds how many different wrong answers a step's wrong
	// samples spread over: 1 makes every wrong answer of a step the same
	// (the worst case MAKER's formulas assume), N their first N in a fixed
	// order. 0 (the default) spreads them over every kind the model has.
	WrongSpread int
	// HardFraction of the steps (chosen by a hash of the prompt, so every
	// sample of a step agrees) are answered at HardAccuracy instead of
	// Accuracy, like the paper's step that needed 18 rounds. 0: none.
	HardFraction, HardAccuracy float64
	// Tasks finds the task specs that requests with hints name (a voter's
	// llm.SimHint), so their steps are answered from the spec's reference
	// answer with accuracy p. Nil: only Towers of Hanoi prompts are
	// answered.
	Tasks task.Source
	// Inputs reads the params that hints name by reference
	// (llm.SimHint.ParamsRef): the fleet's inputs store
	// (*inputs.Store). Nil: such steps are not recognised.
	Inputs Inputs
	// LogRequests, if set, receives every parseable chat-completions
	// request after authentication: its whole body as one compact JSON line,
	// with "temperature": null added when the body has no temperature key.
	// Writes are serialized; write errors are counted, not fatal.
	LogRequests io.Writer
}

// Inputs reads params kept by reference: *inputs.Store.
type Inputs interface {
	Get(ctx context.Context, ref string) ([]byte, error)
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	rate := func(name string, v float64) {
		if math.IsNaN(v) || v < 0 || v > 1 {
			errs = append(errs, fmt.Errorf("%s %v outside [0, 1]", name, v))
		}
	}
	rate("Accuracy", c.Accuracy)
	rate("MalformedRate", c.MalformedRate)
	rate("OverlongRate", c.OverlongRate)
	rate("RateLimitRate", c.RateLimitRate)
	rate("ServerErrorRate", c.ServerErrorRate)
	if c.MalformedRate+c.OverlongRate > 1 {
		errs = append(errs, fmt.Errorf("MalformedRate %v + OverlongRate %v exceeds 1", c.MalformedRate, c.OverlongRate))
	}
	if c.RateLimitRate+c.ServerErrorRate > 1 {
		errs = append(errs, fmt.Errorf("RateLimitRate %v + ServerErrorRate %v exceeds 1", c.RateLimitRate, c.ServerErrorRate))
	}
	if c.Latency < 0 {
		errs = append(errs, fmt.Errorf("negative Latency %s", c.Latency))
	}
	if c.LatencyJitter < 0 {
		errs = append(errs, fmt.Errorf("negative LatencyJitter %s", c.LatencyJitter))
	}
	if math.IsNaN(c.TemperatureSensitivity) || math.IsInf(c.TemperatureSensitivity, 0) {
		errs = append(errs, fmt.Errorf("TemperatureSensitivity %v is not a finite number", c.TemperatureSensitivity))
	}
	if c.RPM < 0 || c.TPM < 0 {
		errs = append(errs, fmt.Errorf("negative RPM %d or TPM %d", c.RPM, c.TPM))
	}
	if c.WrongSpread < 0 {
		errs = append(errs, fmt.Errorf("negative WrongSpread %d", c.WrongSpread))
	}
	rate("HardFraction", c.HardFraction)
	rate("HardAccuracy", c.HardAccuracy)
	if c.HardFraction > 0 && c.HardAccuracy == 0 {
		errs = append(errs, errors.New("HardFraction needs a HardAccuracy above 0"))
	}
	if c.Model != "" && strings.TrimSpace(c.Model) != c.Model {
		errs = append(errs, fmt.Errorf("spaces around Model %q", c.Model))
	}
	if c.Model == AnyModel {
		errs = append(errs, fmt.Errorf("model %q as Model: list it in Models", AnyModel))
	}
	for i, m := range c.Models {
		if m == "" || strings.TrimSpace(m) != m {
			errs = append(errs, fmt.Errorf("model list entry %d (%q): empty or spaces around", i, m))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("simllm: invalid config: %w", err)
	}
	return nil
}

// withDefaults fills in defaults; c must be valid.
func (c Config) withDefaults() Config {
	if c.Accuracy == 0 {
		c.Accuracy = DefaultAccuracy
	}
	if c.TemperatureSensitivity == 0 {
		c.TemperatureSensitivity = DefaultTemperatureSensitivity
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// EffectiveAccuracy is p_eff, the chance a valid answer is right at
// temperature t (see the package comment). c's zero fields take defaults.
func (c Config) EffectiveAccuracy(t float64) float64 {
	c = c.withDefaults()
	return c.effective(c.Accuracy, t)
}

// effective is p_eff for accuracy a at temperature t; c has its defaults.
func (c Config) effective(a, t float64) float64 {
	if a <= 0.5 || c.TemperatureSensitivity < 0 {
		return a
	}
	return 0.5 + (a-0.5)*(1-math.Min(1, c.TemperatureSensitivity*math.Max(0, t-0.1)))
}
