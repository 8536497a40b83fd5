package schemas_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// A price record is the fleet's own word on what tenants pay: a hostile
// model name or price is refused, whoever wrote it.
func TestModelPriceValidate(t *testing.T) {
	t.Parallel()
	rec := func(model string, def bool, in, out float64) *schemas.ModelPrice {
		return &schemas.ModelPrice{Header: schemas.NewHeader(schemas.KindModelPrice), Model: model, Default: def,
			InputUSDPerMTok: in, OutputUSDPerMTok: out, UpdatedAt: time.Unix(1, 0).UTC()}
	}
	tests := []struct {
		name string
		p    *schemas.ModelPrice
		msg  string // "" for valid
	}{
		{"plain", rec("sim-1", false, 0.15, 0.6), ""},
		{"slash and dots", rec("openai/gpt-5.5", false, 5, 20), ""},
		{"free model", rec("local/llama", false, 0, 0), ""},
		{"the most", rec("m", false, schemas.MaxModelPriceUSDPerMTok, schemas.MaxModelPriceUSDPerMTok), ""},
		{"default", rec("", true, 1, 2), ""},
		{"unicode name", rec("модель-1", false, 1, 1), ""},
		{"no model, not default", rec("", false, 1, 1), "model is empty"},
		{"default naming a model", rec("m", true, 1, 1), "the default record names no model"},
		{"model too long", rec(strings.Repeat("m", 201), false, 1, 1), "model is 201 bytes, over 200"},
		{"newline in name", rec("m\nx", false, 1, 1), "holds a control character"},
		{"NUL in name", rec("m\x00", false, 1, 1), "holds a control character"},
		{"bidi control in name", rec("m\u202ex", false, 1, 1), ""}, // Cf, not Cc: a name, not a line break
		{"space around", rec(" m", false, 1, 1), "spaces around"},
		{"not UTF-8", rec("m\xff", false, 1, 1), "not UTF-8"},
		{"NaN in", rec("m", false, math.NaN(), 1), "input_usd_per_mtok must be between 0 and 10000, got NaN"},
		{"NaN out", rec("m", false, 1, math.NaN()), "output_usd_per_mtok must be between 0 and 10000, got NaN"},
		{"negative in", rec("m", false, -0.01, 1), "input_usd_per_mtok must be between 0 and 10000, got -0.01"},
		{"negative out", rec("m", false, 1, -1), "output_usd_per_mtok must be between 0 and 10000, got -1"},
		{"infinite", rec("m", false, math.Inf(1), 1), "got +Inf"},
		{"huge", rec("m", false, 1, 1e6), "output_usd_per_mtok must be between 0 and 10000, got 1e+06"},
		{"wrong kind", func() *schemas.ModelPrice { p := rec("m", false, 1, 1); p.Kind = schemas.KindTenantQuota; return p }(), "want \"model_price\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.p.Validate()
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.msg)
			}
			if !errors.Is(err, schemas.ErrInvalid) && !errors.Is(err, schemas.ErrKind) {
				t.Errorf("Validate = %v, want ErrInvalid or ErrKind", err)
			}
		})
	}
}

// A job's budget no longer needs the job's own pricing: the fleet's table
// prices it (checked where the table is known: at submit and by the
// coordinators).
func TestBudgetWithoutJobPricing(t *testing.T) {
	t.Parallel()
	spec := decodeGolden(t, schemas.KindJobSpec).(*schemas.JobSpec)
	spec.Pricing, spec.BudgetUSD = nil, 5
	spec.Escalation = &schemas.EscalationPolicy{StrongerModel: "big", StrongerSamples: spec.K}
	if err := spec.Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}
}

// An arbitration's budget is a bounded figure.
func TestArbitrationBudgetValidate(t *testing.T) {
	t.Parallel()
	for _, v := range []float64{-1, math.NaN(), math.Inf(1), schemas.MaxBudgetUSD + 1} {
		req := decodeGolden(t, schemas.KindArbitrationRequest).(*schemas.ArbitrationRequest)
		req.BudgetUSD = v
		if err := req.Validate(); err == nil || !strings.Contains(err.Error(), "budget_usd must be between 0") {
			t.Errorf("budget_usd %v: Validate = %v", v, err)
		}
	}
}
