package judge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/makerfleet/makerfleet/schemas"
)

// Settings is the judge's configuration file (YAML or JSON): panels, the
// models and where they live, prices, cost thresholds and limits. Zero
// fields take the documented defaults; DefaultSettings returns them all.
type Settings struct {
	// Panels maps a problem type to its panel's model names. Default: the
	// seed design's panels (see DefaultPanels). A file may set some types;
	// the others keep their defaults.
	Panels map[string][]string `yaml:"panels" json:"panels"`
	// JudgeModel synthesises the panel's answers. Default
	// "anthropic/claude-opus-4.8".
	JudgeModel string `yaml:"judge_model" json:"judge_model"`
	// Models describes each model: where it lives, its key and price. A
	// model not listed uses the default endpoint (--llm-base-url, its key
	// from MAKER_LLM_API_KEY) and DefaultPrice.
	Models map[string]ModelSettings `yaml:"models" json:"models"`
	// DefaultPrice prices models without their own price. Default $15 in,
	// $75 out per million tokens (deliberately high: an unpriced model
	// must not look cheap).
	DefaultPrice *Price `yaml:"default_price" json:"default_price"`
	// Thresholds is the per-type cost threshold in USD (seed: lean_proof
	// 0.50, code_bug 0.30, architecture 1.00, math_novel 0.75, infra_debug
	// 0.40); DefaultThreshold (0.50) covers any other type.
	Thresholds       map[string]float64 `yaml:"thresholds" json:"thresholds"`
	DefaultThreshold float64            `yaml:"default_threshold" json:"default_threshold"`
	// RefuseFactor: an estimate above RefuseFactor × the type's threshold is
	// refused ("escalate to a human"). Default 3.
	RefuseFactor float64 `yaml:"refuse_factor" json:"refuse_factor"`
	// ApprovalUSD: an estimate above it waits for a person's approval.
	// Default 2.00.
	ApprovalUSD float64 `yaml:"approval_usd" json:"approval_usd"`
	// DefaultBudgetUSD is a call's budget when the request sets none; the
	// actual cost may not exceed the budget. Default 1.00.
	DefaultBudgetUSD float64 `yaml:"default_budget_usd" json:"default_budget_usd"`
	// SessionInvocations caps calls per session (default 3), SessionUSD the
	// session's spend (default 5.00).
	SessionInvocations int     `yaml:"session_invocations" json:"session_invocations"`
	SessionUSD         float64 `yaml:"session_usd" json:"session_usd"`
	// TenantInvocations caps one tenant's calls over every session in the
	// last TenantWindow (default 10 in 24h), TenantUSD their spend
	// (default 20.00): a new session does not reset them. The tenant is
	// the one the request's subject names, which the NATS server's
	// permissions tie to the client's identity.
	TenantInvocations int           `yaml:"tenant_invocations" json:"tenant_invocations"`
	TenantUSD         float64       `yaml:"tenant_usd" json:"tenant_usd"`
	TenantWindow      time.Duration `yaml:"tenant_window" json:"tenant_window"`
	// MemberTimeout is the panel's deadline: members still running then are
	// counted as failed. Default 2m.
	MemberTimeout time.Duration `yaml:"member_timeout" json:"member_timeout"`
	// JudgeTimeout bounds one judge call. Default 2m.
	JudgeTimeout time.Duration `yaml:"judge_timeout" json:"judge_timeout"`
	// MemberMaxTokens and JudgeMaxTokens cap each call's output (and so
	// its cost). Defaults 2048 and 4096.
	MemberMaxTokens int `yaml:"member_max_tokens" json:"member_max_tokens"`
	JudgeMaxTokens  int `yaml:"judge_max_tokens" json:"judge_max_tokens"`
	// MaxAttempts per model call, including the first. Default 2.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// Context caps: MaxFileBytes per file (default 64 KiB), MaxContextBytes
	// for all files, the build log and the constraints together (default
	// 256 KiB), MaxContextTokens for the whole member prompt (default
	// 60000).
	MaxFileBytes     int `yaml:"max_file_bytes" json:"max_file_bytes"`
	MaxContextBytes  int `yaml:"max_context_bytes" json:"max_context_bytes"`
	MaxContextTokens int `yaml:"max_context_tokens" json:"max_context_tokens"`
	// HistoryEntries is how many earlier audit records of the session the
	// prompt shows as prior attempts. Default 5.
	HistoryEntries int `yaml:"history_entries" json:"history_entries"`
	// Passthrough, when set, sends every request as one fusion call to a
	// fusion-capable endpoint instead of fanning out here.
	Passthrough *Passthrough `yaml:"passthrough" json:"passthrough"`
	// Arbitration configures arbitration requests (the coordinator's
	// voting steps); see ArbitrationSettings for its defaults.
	Arbitration ArbitrationSettings `yaml:"arbitration" json:"arbitration"`
}

// ArbitrationSettings configure arbitration requests: a voting step's
// candidates put to a panel. An unset field takes the value arbitration
// had while it went through the break-glass gates as a code_bug request,
// so a settings file written before this section keeps its behaviour.
type ArbitrationSettings struct {
	// Panel lists the panel's models. Default: panels.code_bug.
	Panel []string `yaml:"panel" json:"panel"`
	// JudgeModel synthesises the panel's answers. Default: judge_model.
	JudgeModel string `yaml:"judge_model" json:"judge_model"`
	// Threshold is the cost threshold in USD: an estimate above
	// refuse_factor × it is refused. Default: thresholds.code_bug (0.30).
	Threshold float64 `yaml:"threshold" json:"threshold"`
	// BudgetUSD caps one arbitration's actual cost. Default:
	// default_budget_usd (1.00).
	BudgetUSD float64 `yaml:"budget_usd" json:"budget_usd"`
	// JobInvocations caps the arbitrations of one job that reach the panel
	// (default: session_invocations, 3), JobUSD their spend (default:
	// session_usd, 5.00).
	JobInvocations int     `yaml:"job_invocations" json:"job_invocations"`
	JobUSD         float64 `yaml:"job_usd" json:"job_usd"`
}

// ModelSettings is one model's endpoint, key and price.
type ModelSettings struct {
	// BaseURL of its OpenAI-compatible API; default the judge's
	// --llm-base-url.
	BaseURL string `yaml:"base_url" json:"base_url"`
	// APIKeyEnv names the environment variable holding its key (keys never
	// live in the file); default the judge's own key.
	APIKeyEnv string `yaml:"api_key_env" json:"api_key_env"`
	// APIModel is the name sent on the wire; default the model's name.
	APIModel string `yaml:"api_model" json:"api_model"`
	// Price per million tokens; default Settings.DefaultPrice.
	Price *Price `yaml:"price" json:"price"`
}

// Price is a model's price in USD per million tokens.
type Price struct {
	InputUSDPerMTok  float64 `yaml:"input_usd_per_mtok" json:"input_usd_per_mtok"`
	OutputUSDPerMTok float64 `yaml:"output_usd_per_mtok" json:"output_usd_per_mtok"`
}

// Passthrough is a fusion-capable endpoint (OpenRouter's fusion plugin or
// the same shape): the judge sends model, plugins and messages there.
type Passthrough struct {
	// BaseURL of the endpoint; default the judge's --llm-base-url.
	BaseURL string `yaml:"base_url" json:"base_url"`
	// APIKeyEnv names the environment variable holding its key.
	APIKeyEnv string `yaml:"api_key_env" json:"api_key_env"`
	// Model is sent as the request's model. Default "openrouter/fusion".
	Model string `yaml:"model" json:"model"`
}

// DefaultPanels returns the seed design's panel per problem type.
func DefaultPanels() map[string][]string {
	return map[string][]string{
		schemas.ProblemLeanProof:    {"anthropic/claude-opus", "deepseek/deepseek-v4", "google/gemini-3.1-pro"},
		schemas.ProblemCodeBug:      {"openai/gpt-5.5", "anthropic/claude-fable", "moonshotai/kimi-k2.6"},
		schemas.ProblemArchitecture: {"anthropic/claude-opus", "openai/gpt-5.5", "google/gemini-3.1-pro"},
		schemas.ProblemMathNovel:    {"deepseek/deepseek-v4-pro", "anthropic/claude-opus", "google/gemini-3.1-pro"},
		schemas.ProblemInfraDebug:   {"openai/gpt-5.5", "anthropic/claude-opus", "deepseek/deepseek-v4-pro"},
	}
}

// DefaultThresholds returns the seed design's cost thresholds.
func DefaultThresholds() map[string]float64 {
	return map[string]float64{
		schemas.ProblemLeanProof:    0.50,
		schemas.ProblemCodeBug:      0.30,
		schemas.ProblemArchitecture: 1.00,
		schemas.ProblemMathNovel:    0.75,
		schemas.ProblemInfraDebug:   0.40,
	}
}

// defaultPrices are placeholder list prices (USD per million tokens) for
// the default panels; set real ones in the settings file.
func defaultPrices() map[string]Price {
	return map[string]Price{
		"anthropic/claude-opus":     {15, 75},
		"anthropic/claude-opus-4.8": {15, 75},
		"anthropic/claude-fable":    {3, 15},
		"openai/gpt-5.5":            {5, 20},
		"google/gemini-3.1-pro":     {2.5, 15},
		"deepseek/deepseek-v4":      {0.5, 2},
		"deepseek/deepseek-v4-pro":  {1, 4},
		"moonshotai/kimi-k2.6":      {1, 4},
	}
}

// Defaults.
const (
	DefaultJudgeModel       = "anthropic/claude-opus-4.8"
	DefaultPassthroughModel = "openrouter/fusion"
)

// DefaultSettings returns the settings with every default filled in.
func DefaultSettings() Settings {
	s := Settings{}
	s.fill()
	return s
}

// WithDefaults returns s with its zero fields at their defaults, validated.
func (s Settings) WithDefaults() (Settings, error) {
	s.fill()
	if err := s.validate(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// fill sets zero fields to their defaults.
func (s *Settings) fill() {
	panels := DefaultPanels()
	for t, p := range s.Panels {
		panels[t] = p
	}
	s.Panels = panels
	if s.JudgeModel == "" {
		s.JudgeModel = DefaultJudgeModel
	}
	models := make(map[string]ModelSettings)
	for name, p := range defaultPrices() {
		models[name] = ModelSettings{Price: &p}
	}
	for name, m := range s.Models {
		if m.Price == nil {
			m.Price = models[name].Price
		}
		models[name] = m
	}
	s.Models = models
	if s.DefaultPrice == nil {
		s.DefaultPrice = &Price{15, 75}
	}
	th := DefaultThresholds()
	for t, v := range s.Thresholds {
		th[t] = v
	}
	s.Thresholds = th
	setF := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	setI := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setF(&s.DefaultThreshold, 0.50)
	setF(&s.RefuseFactor, 3)
	setF(&s.ApprovalUSD, 2.00)
	setF(&s.DefaultBudgetUSD, 1.00)
	setF(&s.SessionUSD, 5.00)
	setI(&s.SessionInvocations, 3)
	setI(&s.TenantInvocations, 10)
	setF(&s.TenantUSD, 20.00)
	setD(&s.TenantWindow, 24*time.Hour)
	setD(&s.MemberTimeout, 2*time.Minute)
	setD(&s.JudgeTimeout, 2*time.Minute)
	setI(&s.MemberMaxTokens, 2048)
	setI(&s.JudgeMaxTokens, 4096)
	setI(&s.MaxAttempts, 2)
	setI(&s.MaxFileBytes, 64<<10)
	setI(&s.MaxContextBytes, 256<<10)
	setI(&s.MaxContextTokens, 60_000)
	setI(&s.HistoryEntries, 5)
	if s.Passthrough != nil && s.Passthrough.Model == "" {
		s.Passthrough.Model = DefaultPassthroughModel
	}
	// Arbitration's defaults are the values above it took before.
	a := &s.Arbitration
	if len(a.Panel) == 0 {
		a.Panel = slices.Clone(s.Panels[schemas.ProblemCodeBug])
	}
	if a.JudgeModel == "" {
		a.JudgeModel = s.JudgeModel
	}
	setF(&a.Threshold, s.Threshold(schemas.ProblemCodeBug))
	setF(&a.BudgetUSD, s.DefaultBudgetUSD)
	setI(&a.JobInvocations, s.SessionInvocations)
	setF(&a.JobUSD, s.SessionUSD)
}

// validate reports every invalid field of filled settings.
func (s *Settings) validate() error {
	var errs []error
	for t, p := range s.Panels {
		if !schemas.ValidProblemType(t) {
			errs = append(errs, fmt.Errorf("panels: unknown problem type %q (want one of %s)", t, strings.Join(schemas.ProblemTypes(), ", ")))
		}
		if len(p) == 0 {
			errs = append(errs, fmt.Errorf("panels.%s is empty", t))
		}
		for _, m := range p {
			if strings.TrimSpace(m) == "" {
				errs = append(errs, fmt.Errorf("panels.%s names an empty model", t))
			}
		}
	}
	if len(s.Arbitration.Panel) == 0 {
		errs = append(errs, errors.New("arbitration.panel is empty"))
	}
	for _, m := range s.Arbitration.Panel {
		if strings.TrimSpace(m) == "" {
			errs = append(errs, errors.New("arbitration.panel names an empty model"))
		}
	}
	for t := range s.Thresholds {
		if !schemas.ValidProblemType(t) {
			errs = append(errs, fmt.Errorf("thresholds: unknown problem type %q", t))
		}
	}
	money := func(name string, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be a positive number, got %v", name, v))
		}
	}
	for t, v := range s.Thresholds {
		money("thresholds."+t, v)
	}
	money("default_threshold", s.DefaultThreshold)
	money("refuse_factor", s.RefuseFactor)
	money("approval_usd", s.ApprovalUSD)
	money("default_budget_usd", s.DefaultBudgetUSD)
	money("session_usd", s.SessionUSD)
	money("tenant_usd", s.TenantUSD)
	money("arbitration.threshold", s.Arbitration.Threshold)
	money("arbitration.budget_usd", s.Arbitration.BudgetUSD)
	money("arbitration.job_usd", s.Arbitration.JobUSD)
	for name, m := range s.Models {
		if p := m.Price; p != nil && (p.InputUSDPerMTok < 0 || p.OutputUSDPerMTok < 0 || math.IsNaN(p.InputUSDPerMTok+p.OutputUSDPerMTok) || math.IsInf(p.InputUSDPerMTok+p.OutputUSDPerMTok, 0)) {
			errs = append(errs, fmt.Errorf("models.%s.price must be finite and >= 0", name))
		}
	}
	if p := s.DefaultPrice; p.InputUSDPerMTok < 0 || p.OutputUSDPerMTok < 0 {
		errs = append(errs, errors.New("default_price must be >= 0"))
	}
	for name, v := range map[string]int{
		"session_invocations": s.SessionInvocations, "tenant_invocations": s.TenantInvocations, "member_max_tokens": s.MemberMaxTokens,
		"judge_max_tokens": s.JudgeMaxTokens, "max_attempts": s.MaxAttempts, "max_file_bytes": s.MaxFileBytes,
		"max_context_bytes": s.MaxContextBytes, "max_context_tokens": s.MaxContextTokens, "history_entries": s.HistoryEntries,
		"arbitration.job_invocations": s.Arbitration.JobInvocations,
	} {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s must be >= 1, got %d", name, v))
		}
	}
	if s.TenantWindow < time.Minute {
		errs = append(errs, fmt.Errorf("tenant_window must be at least 1m, got %s", s.TenantWindow))
	}
	if s.MemberTimeout <= 0 || s.JudgeTimeout <= 0 {
		errs = append(errs, errors.New("member_timeout and judge_timeout must be > 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// ParseSettings reads settings from YAML (or JSON), rejecting unknown keys,
// and fills in the defaults.
func ParseSettings(data []byte) (Settings, error) {
	var s Settings
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) { // empty: the defaults
		return Settings{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return s.WithDefaults()
}

// LoadSettings reads the settings file at path; "" means DefaultSettings.
func LoadSettings(path string) (Settings, error) {
	if path == "" {
		return DefaultSettings(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Settings{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	s, err := ParseSettings(data)
	if err != nil {
		return Settings{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Threshold returns the cost threshold of problem type t.
func (s *Settings) Threshold(t string) float64 {
	if v, ok := s.Thresholds[t]; ok {
		return v
	}
	return s.DefaultThreshold
}

// PriceOf returns model's price.
func (s *Settings) PriceOf(model string) Price {
	if m, ok := s.Models[model]; ok && m.Price != nil {
		return *m.Price
	}
	return *s.DefaultPrice
}

// Panel returns problem type t's panel (a copy).
func (s *Settings) Panel(t string) []string { return slices.Clone(s.Panels[t]) }
