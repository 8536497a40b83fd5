package pricing_test

import (
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
	if strings.Contains(base.Basis, "tokens per call") {
		t.Errorf("no estimates, yet %q", base.Basis)
	}
	bad := schemas.JobSpec{Header: schemas.NewHeader(schemas.KindJobSpec), JobID: "j1", Tenant: "default", Task: "hanoi",
		Params: []byte(`{"disks":3}`), K: 3, CompletionTokensEstimate: -1}
	bad.ApplyDefaults()
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "completion_tokens_estimate") {
		t.Errorf("negative estimate: %v", err)
	}
}
