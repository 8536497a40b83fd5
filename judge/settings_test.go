package judge_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestParseSettings(t *testing.T) {
	t.Parallel()
	s, err := judge.ParseSettings([]byte(`
panels:
  code_bug: [openai/gpt-5.5, local/qwen]
judge_model: anthropic/claude-opus-4.8
models:
  local/qwen:
    base_url: http://127.0.0.1:8080/v1
    api_model: qwen3
    price: {input_usd_per_mtok: 0, output_usd_per_mtok: 0}
  openai/gpt-5.5:
    api_key_env: OPENROUTER_API_KEY
thresholds: {code_bug: 0.25}
session_invocations: 5
member_timeout: 45s
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Panel(schemas.ProblemCodeBug); strings.Join(got, ",") != "openai/gpt-5.5,local/qwen" {
		t.Errorf("code_bug panel %v", got)
	}
	if got := s.Panel(schemas.ProblemLeanProof); len(got) != 3 {
		t.Errorf("lean_proof panel keeps its default, got %v", got)
	}
	if s.Threshold(schemas.ProblemCodeBug) != 0.25 || s.Threshold(schemas.ProblemArchitecture) != 1.00 || s.Threshold("other") != 0.50 {
		t.Error("thresholds")
	}
	if s.SessionInvocations != 5 || s.SessionUSD != 5.00 || s.MemberTimeout != 45*time.Second || s.ApprovalUSD != 2 || s.DefaultBudgetUSD != 1 {
		t.Errorf("limits %+v", s)
	}
	if p := s.PriceOf("openai/gpt-5.5"); p.OutputUSDPerMTok != 20 {
		t.Errorf("a model listed without price keeps its default price, got %+v", p)
	}
	if p := s.PriceOf("local/qwen"); p.InputUSDPerMTok != 0 {
		t.Errorf("local/qwen price %+v", p)
	}
	if p := s.PriceOf("unknown/model"); p.OutputUSDPerMTok != 75 {
		t.Errorf("unknown model price %+v", p)
	}
	if empty, err := judge.ParseSettings(nil); err != nil || empty.JudgeModel != judge.DefaultJudgeModel {
		t.Errorf("empty file: %v", err)
	}
	if d := judge.DefaultSettings(); d.TenantInvocations != 10 || d.TenantUSD != 20 || d.TenantWindow != 24*time.Hour {
		t.Errorf("tenant limits default to %d calls, $%.2f, %s; want 10, $20.00, 24h", d.TenantInvocations, d.TenantUSD, d.TenantWindow)
	}
	if s, err := judge.ParseSettings([]byte("tenant_invocations: 50\ntenant_usd: 100\ntenant_window: 168h\n")); err != nil || s.TenantInvocations != 50 || s.TenantWindow != 168*time.Hour {
		t.Errorf("tenant limits from a file: %+v, %v", s, err)
	}

	for _, bad := range []string{
		"panel: {}",              // unknown key
		"panels: {poetry: [a]}",  // unknown type
		"panels: {code_bug: []}", // empty panel
		"session_usd: -1",        // negative money
		"member_timeout: soon",   // not a duration
		"tenant_window: 30s",     // a window under a minute
		"tenant_invocations: -1", // no calls at all
		"tenant_usd: -5",         // negative money
		"models: {a: {price: {input_usd_per_mtok: -2}}}",
	} {
		if _, err := judge.ParseSettings([]byte(bad)); !errors.Is(err, judge.ErrConfig) {
			t.Errorf("ParseSettings(%q) = %v, want ErrConfig", bad, err)
		}
	}
}

func TestGate(t *testing.T) {
	t.Parallel()
	s := judge.DefaultSettings()
	tests := []struct {
		typ              string
		estimate, budget float64
		approved         bool
		want, reason     string
	}{
		{schemas.ProblemCodeBug, 0.20, 1, false, judge.GateProceed, ""},
		{schemas.ProblemCodeBug, 0.91, 1, false, judge.GateRefuse, "escalate to a human"},
		{schemas.ProblemCodeBug, 0.89, 0.5, false, judge.GateRefuse, "over the call's budget $0.50"},
		{schemas.ProblemArchitecture, 2.50, 3, false, judge.GateHold, "held until a person approves"},
		{schemas.ProblemArchitecture, 2.50, 3, true, judge.GateProceed, ""},
		{schemas.ProblemArchitecture, 3.01, 5, true, judge.GateRefuse, "escalate to a human"}, // approval never lifts the hard cap
		{schemas.ProblemLeanProof, 1.50, 2, false, judge.GateProceed, ""},
		{schemas.ProblemLeanProof, 1.51, 2, false, judge.GateRefuse, "escalate"},
		{schemas.ProblemMathNovel, 2.25, 3, false, judge.GateHold, "held"},
		{schemas.ProblemInfraDebug, 1.21, 3, false, judge.GateRefuse, "0.40"},
		{"unknown", 1.49, 2, false, judge.GateProceed, ""},
	}
	for _, tt := range tests {
		got, reason := s.Gate(tt.typ, tt.estimate, tt.budget, tt.approved)
		if got != tt.want || !strings.Contains(reason, tt.reason) {
			t.Errorf("Gate(%s, %v, %v, %v) = %s %q, want %s %q", tt.typ, tt.estimate, tt.budget, tt.approved, got, reason, tt.want, tt.reason)
		}
	}
}

// The documented example settings file parses and means what it says.
func TestExampleSettingsFile(t *testing.T) {
	t.Parallel()
	s, err := judge.LoadSettings("../docs/judge.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s.ApprovalUSD != 2 || s.SessionInvocations != 3 || s.SessionUSD != 5 || s.Models["local/qwen3"].APIModel != "qwen3-32b" ||
		s.Models["anthropic/claude-opus"].APIKeyEnv != "OPENROUTER_API_KEY" || s.Passthrough != nil {
		t.Errorf("settings %+v", s)
	}
	def := judge.DefaultSettings()
	if !reflect.DeepEqual(s.Arbitration, def.Arbitration) {
		t.Errorf("arbitration %+v: the example differs from the defaults it documents (%+v)", s.Arbitration, def.Arbitration)
	}
	for _, typ := range schemas.ProblemTypes() {
		if strings.Join(s.Panel(typ), ",") != strings.Join(def.Panel(typ), ",") || s.Threshold(typ) != def.Threshold(typ) {
			t.Errorf("%s: the example differs from the defaults it documents", typ)
		}
	}
}

// Any settings file either fails with ErrConfig or gives valid settings
// with every limit set.
func FuzzParseSettings(f *testing.F) {
	f.Add([]byte("panels: {code_bug: [a, b]}\nsession_usd: 2\nmember_timeout: 30s\n"))
	f.Add([]byte(`{"thresholds": {"lean_proof": 0.1}, "models": {"m": {"price": {"input_usd_per_mtok": 1}}}}`))
	f.Add([]byte("passthrough: {model: x}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := judge.ParseSettings(data)
		if err != nil {
			if !errors.Is(err, judge.ErrConfig) {
				t.Fatalf("error %v is not ErrConfig", err)
			}
			return
		}
		if s.SessionInvocations < 1 || !(s.SessionUSD > 0) || s.MemberTimeout <= 0 || s.JudgeModel == "" || len(s.Panels) < 5 {
			t.Fatalf("accepted settings %+v", s)
		}
		if _, err := s.WithDefaults(); err != nil {
			t.Fatalf("accepted settings do not validate again: %v", err)
		}
	})
}

// A judge refuses to start when a configured model has nowhere to live.
func TestNewNeedsEndpoints(t *testing.T) {
	t.Parallel()
	s := judge.Settings{Models: map[string]judge.ModelSettings{}}
	for _, typ := range schemas.ProblemTypes() {
		s.Models[typ+"-model"] = judge.ModelSettings{BaseURL: "http://127.0.0.1:1/v1"}
	}
	_, err := judge.New(context.Background(), nil, judge.Config{Settings: s})
	if !errors.Is(err, judge.ErrConfig) || !strings.Contains(err.Error(), "has no base_url") {
		t.Errorf("New without endpoints: %v", err)
	}
	s.Passthrough = &judge.Passthrough{}
	if _, err := judge.New(context.Background(), nil, judge.Config{Settings: s}); !errors.Is(err, judge.ErrConfig) || !strings.Contains(err.Error(), "passthrough") {
		t.Errorf("New with a passthrough without endpoint: %v", err)
	}
}

// Arbitration's settings default to what arbitration used before it had a
// section: the code_bug panel and threshold, the judge model, the default
// budget and the session limits, per job. Set fields are kept.
func TestArbitrationSettings(t *testing.T) {
	t.Parallel()
	s, err := judge.ParseSettings([]byte("panels: {code_bug: [a, b]}\njudge_model: j\nthresholds: {code_bug: 0.2}\nsession_usd: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := judge.ArbitrationSettings{Panel: []string{"a", "b"}, JudgeModel: "j", Threshold: 0.2, BudgetUSD: 1, JobInvocations: 3, JobUSD: 4}
	if !reflect.DeepEqual(s.Arbitration, want) {
		t.Errorf("defaults %+v, want %+v", s.Arbitration, want)
	}
	s, err = judge.ParseSettings([]byte("arbitration: {panel: [x, y, z], judge_model: k, threshold: 0.5, budget_usd: 2, job_invocations: 10, job_usd: 20}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want = judge.ArbitrationSettings{Panel: []string{"x", "y", "z"}, JudgeModel: "k", Threshold: 0.5, BudgetUSD: 2, JobInvocations: 10, JobUSD: 20}
	if !reflect.DeepEqual(s.Arbitration, want) || strings.Join(s.Panel(schemas.ProblemCodeBug), ",") == "x,y,z" {
		t.Errorf("set %+v, want %+v and the code_bug panel untouched", s.Arbitration, want)
	}
	for _, bad := range []string{
		"arbitration: {threshold: -1}",
		"arbitration: {job_usd: .nan}",
		"arbitration: {job_invocations: -2}",
		"arbitration: {panel: [a, '  ']}",
		"arbitration: {panels: [a]}",
	} {
		if _, err := judge.ParseSettings([]byte(bad)); !errors.Is(err, judge.ErrConfig) {
			t.Errorf("ParseSettings(%q) = %v, want ErrConfig", bad, err)
		}
	}
}
