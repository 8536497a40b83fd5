package schemas

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// KindCalibration is the kind of a model's calibration on a task (bucket
// maker_calibrations).
const KindCalibration = "calibration"

// Calibration methods: how the confidence intervals were computed.
const (
	// CalibrationClopperPearson: the exact binomial (Clopper–Pearson)
	// interval, central, at Confidence.
	CalibrationClopperPearson = "clopper-pearson"
)

// MaxCalibrationSamples bounds the samples of one calibration.
const MaxCalibrationSamples = 1_000_000

// Calibration is what a model was measured to do on randomly drawn steps
// of a task (maker calibrate): the chance a valid sample is right, the
// share of samples that survive red-flagging and the tokens a call costs,
// each with a confidence interval. It is a fleet-wide fact about a model,
// stored per task, model and prompt version; plan and forecasts take p from
// it, adaptive k takes PLow as its prior.
type Calibration struct {
	Header
	// Task is the task's name; TaskVersion and TaskHash pin a task spec
	// (empty for a built-in task).
	Task        string `json:"task"`
	TaskVersion string `json:"task_version,omitempty"`
	TaskHash    string `json:"task_hash,omitempty"`
	// Params are the params of the instance the steps were drawn from
	// (the measurement is taken to hold for other params of the same
	// prompt: the paper's per-step error barely moved from 10 to 20 disks).
	Params json.RawMessage `json:"params,omitempty"`
	// Model is the model name the samples were asked of.
	Model string `json:"model"`
	// PromptVersion is a short hash of the task's prompt template (a
	// built-in task) or of the spec (a task spec): a calibration holds for
	// the prompt it measured.
	PromptVersion string `json:"prompt_version"`
	// Temperature and MaxOutputTokens are those of every sample (the
	// paper's calibration: 0.1, the temperature of a step's later votes;
	// the red-flag limit of a job).
	Temperature     float64 `json:"temperature"`
	MaxOutputTokens int     `json:"max_output_tokens"`
	// Samples are the model calls answered (valid or red-flagged); Valid
	// those that were votes; Right the votes equal to the task's reference
	// answer. Failed counts calls that ended without an answer (the model
	// server failed): not samples, not in any figure.
	Samples int64 `json:"samples"`
	Valid   int64 `json:"valid"`
	Right   int64 `json:"right"`
	Failed  int64 `json:"failed,omitempty"`
	// P is Right / Valid, the chance a valid sample is right; PLow and
	// PHigh its interval at Confidence.
	P     float64 `json:"p"`
	PLow  float64 `json:"p_low"`
	PHigh float64 `json:"p_high"`
	// ValidFraction is Valid / Samples, the share that survives
	// red-flagging; ValidLow and ValidHigh its interval at Confidence.
	ValidFraction float64 `json:"valid_fraction"`
	ValidLow      float64 `json:"valid_low"`
	ValidHigh     float64 `json:"valid_high"`
	// PromptTokensMean and CompletionTokensMean are the mean usage of an
	// answered call; TokensPerCall their sum.
	PromptTokensMean     float64 `json:"prompt_tokens_mean"`
	CompletionTokensMean float64 `json:"completion_tokens_mean"`
	TokensPerCall        float64 `json:"tokens_per_call"`
	// RedFlags counts the red-flagged samples by reason.
	RedFlags map[string]int64 `json:"red_flags,omitempty"`
	// Confidence is the intervals' level, in (0, 1); Method how they were
	// computed (CalibrationClopperPearson).
	Confidence float64 `json:"confidence"`
	Method     string  `json:"method"`
	// Seed drew the steps and seeded the samples.
	Seed int64 `json:"seed"`
	// MeasuredAt is when the measurement ended.
	MeasuredAt time.Time `json:"measured_at"`
}

// MessageKind implements Message.
func (*Calibration) MessageKind() string { return KindCalibration }

// Validate implements Message.
func (c *Calibration) Validate() error {
	const k = KindCalibration
	if err := c.Header.check(k); err != nil {
		return err
	}
	switch {
	case c.Task == "" || len(c.Task) > 200:
		return invalid(k, "task must be 1-200 bytes")
	case c.Model == "" || len(c.Model) > 1000:
		return invalid(k, "model must be 1-1000 bytes")
	case c.PromptVersion == "" || len(c.PromptVersion) > 100:
		return invalid(k, "prompt_version must be 1-100 bytes")
	case c.Samples < 1 || c.Samples > MaxCalibrationSamples:
		return invalid(k, "samples must be between 1 and %d, got %d", MaxCalibrationSamples, c.Samples)
	case c.Valid < 0 || c.Valid > c.Samples:
		return invalid(k, "valid %d outside [0, samples %d]", c.Valid, c.Samples)
	case c.Right < 0 || c.Right > c.Valid:
		return invalid(k, "right %d outside [0, valid %d]", c.Right, c.Valid)
	case c.Failed < 0:
		return invalid(k, "failed must not be negative")
	case !(c.Confidence > 0 && c.Confidence < 1):
		return invalid(k, "confidence %v must be in (0, 1)", c.Confidence)
	case c.Method != CalibrationClopperPearson:
		return invalid(k, "method %q: want %q", c.Method, CalibrationClopperPearson)
	case !(c.Temperature >= 0 && c.Temperature <= MaxTemperature):
		return invalid(k, "temperature %v outside [0, %d]", c.Temperature, MaxTemperature)
	case c.MaxOutputTokens < 1:
		return invalid(k, "max_output_tokens must be >= 1")
	}
	for _, f := range []struct {
		name, low, high string
		lo, v, hi       float64
	}{
		{"p", "p_low", "p_high", c.PLow, c.P, c.PHigh},
		{"valid_fraction", "valid_low", "valid_high", c.ValidLow, c.ValidFraction, c.ValidHigh},
	} {
		switch {
		case !(f.v >= 0 && f.v <= 1):
			return invalid(k, "%s %v outside [0, 1]", f.name, f.v)
		case !(f.lo >= 0 && f.lo <= f.v):
			return invalid(k, "%s %v must be in [0, %s %v]", f.low, f.lo, f.name, f.v)
		case !(f.hi >= f.v && f.hi <= 1):
			return invalid(k, "%s %v must be in [%s %v, 1]", f.high, f.hi, f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"prompt_tokens_mean", c.PromptTokensMean}, {"completion_tokens_mean", c.CompletionTokensMean}, {"tokens_per_call", c.TokensPerCall}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			return invalid(k, "%s must be finite and >= 0, got %v", f.name, f.v)
		}
	}
	var flagged int64
	for why, n := range c.RedFlags {
		if !ValidRedFlagName(why) {
			return invalid(k, "red_flags: %q is not a red flag reason", why)
		}
		if n < 0 {
			return invalid(k, "red_flags: %s is negative", why)
		}
		flagged += n
	}
	if flagged != c.Samples-c.Valid {
		return invalid(k, "red_flags add up to %d, samples − valid is %d", flagged, c.Samples-c.Valid)
	}
	return nil
}

// JobP is the p a job takes from c, and where it comes from: c's
// estimate, or its interval's lower end when no valid sample was wrong (an
// estimate of 1 would make voting look free).
func (c Calibration) JobP() (float64, string) {
	model := c.Model
	if len(model) > 60 {
		model = model[:60] + "…"
	}
	src := fmt.Sprintf("calibration %s n=%d (%s, prompt %s, p in [%.4g, %.4g] at %g %%)",
		c.MeasuredAt.Format(time.DateOnly), c.Samples, model, c.PromptVersion, c.PLow, c.PHigh, 100*c.Confidence)
	if c.P >= 1 {
		return c.PLow, src + ", its lower end: no valid sample was wrong"
	}
	return c.P, src
}

// ApplyTo gives spec what c measured: p (JobP), the valid fraction and
// the tokens of a call, which its forecast and k then take.
func (c Calibration) ApplyTo(spec *JobSpec) {
	spec.PEstimate, _ = c.JobP()
	spec.ValidFraction = c.ValidFraction
	spec.PromptTokensEstimate, spec.CompletionTokensEstimate = c.PromptTokensMean, c.CompletionTokensMean
}
