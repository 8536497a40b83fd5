package pricing_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestForecastCalibratedTokens: a spec's token estimates (a calibration's
// means) price the expected figure, the band widened to hold it; one left
// out keeps its default.
func TestForecastCalibratedTokens(t *testing.T) {
	t.Parallel()
	inst := hanoi(t, 4) // 15 steps
	price := &schemas.Pricing{InputUSDPerMTok: 0.4, OutputUSDPerMTok: 1.6}
	usd := func(in, out float64) float64 { return (in*0.4 + out*1.6) / 1e6 }
	n := plan.ExpectedVotes(0.99, 3)
	base := pricing.Forecast(schemas.JobSpec{K: 3, Pricing: price, PEstimate: 0.99}, inst, schemas.TenantQuota{}, pricing.Table{})
	for _, tc := range []struct {
		name    string
		in, out float64
		perCall float64
	}{
		{"both", 600, 200, usd(600, 200)},
		{"a huge reply", 600, 5000, usd(600, 5000)},
	} {
		f := pricing.Forecast(schemas.JobSpec{K: 3, Pricing: price, PEstimate: 0.99, PromptTokensEstimate: tc.in, CompletionTokensEstimate: tc.out},
			inst, schemas.TenantQuota{}, pricing.Table{})
		if want := 15 * n * tc.perCall; math.Abs(f.CostUSD-want) > 1e-12 {
			t.Errorf("%s: expected cost %v, want %v", tc.name, f.CostUSD, want)
		}
		if !(f.CostLowUSD <= f.CostUSD && f.CostUSD <= f.CostHighUSD) || !strings.Contains(f.Basis, "tokens per call from the job") {
			t.Errorf("%s: band [%v, %v, %v], basis %q", tc.name, f.CostLowUSD, f.CostUSD, f.CostHighUSD, f.Basis)
		}
		if f.CostHighUSD < base.CostHighUSD || f.CostLowUSD > base.CostLowUSD {
			t.Errorf("%s: the band [%v, %v] narrowed from [%v, %v]", tc.name, f.CostLowUSD, f.CostHighUSD, base.CostLowUSD, base.CostHighUSD)
		}
	}
	if strings.Contains(base.Basis, "tokens per call from the job") || !strings.Contains(base.Basis, "tokens per call assumed") || base.Calibrated {
		t.Errorf("no estimates, yet %q (calibrated %v)", base.Basis, base.Calibrated)
	}
	bad := schemas.JobSpec{Header: schemas.NewHeader(schemas.KindJobSpec), JobID: "j1", Tenant: "default", Task: "hanoi",
		Params: []byte(`{"disks":3}`), K: 3, CompletionTokensEstimate: -1}
	bad.ApplyDefaults()
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "completion_tokens_estimate") {
		t.Errorf("negative estimate: %v", err)
	}
}

// TestAdmitCalibrated: a calibrated forecast's central cost refuses a
// budget below it; an uncalibrated one refuses only below its low end,
// k samples a step of the prompt and the bare right answer (a floor no
// run goes under), so a guess never refuses a job that would fit.
func TestAdmitCalibrated(t *testing.T) {
	t.Parallel()
	inst := hanoi(t, 4)
	price := &schemas.Pricing{InputUSDPerMTok: 0.4, OutputUSDPerMTok: 1.6}
	guess := pricing.Forecast(schemas.JobSpec{K: 3, Pricing: price}, inst, schemas.TenantQuota{}, pricing.Table{})
	cal := pricing.Forecast(schemas.JobSpec{K: 3, Pricing: price, PEstimate: 0.95, PromptTokensEstimate: 240, CompletionTokensEstimate: 57},
		inst, schemas.TenantQuota{}, pricing.Table{})
	if guess.Calibrated || !cal.Calibrated {
		t.Fatalf("calibrated: guess %v, measured %v", guess.Calibrated, cal.Calibrated)
	}
	// The floor: 15 steps × 3 samples × (the prompt, and the answer's key
	// of about 80 bytes); far under what a run of 57 tokens a reply costs.
	if run := 15 * 3 * (240*0.4 + 57*1.6) / 1e6; guess.CostLowUSD >= run {
		t.Errorf("the uncalibrated low end $%v is above the cost of a run that replies in 57 tokens ($%v)", guess.CostLowUSD, run)
	}
	for _, tc := range []struct {
		name   string
		f      schemas.Forecast
		budget float64
		ok     bool
	}{
		{"guess: above the floor, below the guess", guess, (guess.CostLowUSD + guess.CostUSD) / 2, true},
		{"guess: below the floor", guess, guess.CostLowUSD * 0.9, false},
		{"calibrated: at the central cost", cal, cal.CostUSD, true},
		{"calibrated: below the central cost", cal, cal.CostUSD * 0.9, false},
		{"no budget", cal, 0, true},
	} {
		err := pricing.Admit(schemas.JobSpec{BudgetUSD: tc.budget}, tc.f)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, pricing.ErrOverBudget)) {
			t.Errorf("%s: budget $%v: %v, want admitted %v", tc.name, tc.budget, err, tc.ok)
		}
	}
}
