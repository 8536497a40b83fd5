package pricing_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/schemas"
)

func price(model string, in, out float64) schemas.ModelPrice {
	return schemas.ModelPrice{Header: schemas.NewHeader(schemas.KindModelPrice), Model: model, Default: model == "",
		InputUSDPerMTok: in, OutputUSDPerMTok: out}
}

func pr(in, out float64) schemas.Pricing {
	return schemas.Pricing{InputUSDPerMTok: in, OutputUSDPerMTok: out}
}

// Of: the fleet's price of the model the request named, whatever the job
// claims; the job's own only on a fleet without a table.
func TestOf(t *testing.T) {
	t.Parallel()
	fleet := pricing.NewTable([]schemas.ModelPrice{price("", 0.15, 0.6), price("big", 5, 20), price("mix-a", 1, 2)})
	onlyBig := pricing.NewTable([]schemas.ModelPrice{price("big", 5, 20)})
	claim := &schemas.Pricing{}                         // "pricing": 0, the claim of issue 19
	bigClaim := &schemas.Pricing{InputUSDPerMTok: 0.01} // a stronger model claimed cheap
	spec := func(p, sp *schemas.Pricing) *schemas.JobSpec {
		return &schemas.JobSpec{Pricing: p, Escalation: &schemas.EscalationPolicy{StrongerModel: "big", StrongerPricing: sp}}
	}
	tests := []struct {
		name     string
		table    pricing.Table
		spec     *schemas.JobSpec
		model    string
		stronger bool
		want     schemas.Pricing
		src      pricing.Source
	}{
		{"own model at the default record, not the job's 0", fleet, spec(claim, nil), "", false, pr(0.15, 0.6), pricing.Fleet},
		{"own model, job without pricing", fleet, spec(nil, nil), "", false, pr(0.15, 0.6), pricing.Fleet},
		{"stronger model at its own record, not its claim", fleet, spec(claim, bigClaim), "big", true, pr(5, 20), pricing.Fleet},
		{"decorrelation model at its record", fleet, spec(claim, nil), "mix-a", false, pr(1, 2), pricing.Fleet},
		{"a named model never falls back to the default", fleet, spec(claim, nil), "mix-b", false, schemas.Pricing{}, pricing.Absent},
		{"no default record: the own model is unpriced", onlyBig, spec(&schemas.Pricing{InputUSDPerMTok: 9}, nil), "", false, schemas.Pricing{}, pricing.Absent},
		{"a table, however small, ends the job's claims", onlyBig, spec(claim, bigClaim), "mix-a", false, schemas.Pricing{}, pricing.Absent},
		{"no table: the job's own, unverified", pricing.Table{}, spec(&schemas.Pricing{InputUSDPerMTok: 2}, nil), "", false, pr(2, 0), pricing.Job},
		{"no table: the stronger model's claim", pricing.Table{}, spec(&schemas.Pricing{InputUSDPerMTok: 2}, bigClaim), "big", true, *bigClaim, pricing.Job},
		{"no table: the stronger model at the job's without its own", pricing.Table{}, spec(&schemas.Pricing{InputUSDPerMTok: 2}, nil), "big", true, pr(2, 0), pricing.Job},
		{"no table, no claim", pricing.Table{}, spec(nil, nil), "", false, schemas.Pricing{}, pricing.None},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, src := pricing.Of(tt.table, tt.spec, tt.model, tt.stronger)
			if got != tt.want || src != tt.src {
				t.Errorf("Of = %+v, %v; want %+v, %v", got, src, tt.want, tt.src)
			}
		})
	}
}

// NewTable keeps only records that validate: a record written around the
// store (NaN, negative, huge, a hostile name) prices nothing.
func TestNewTableDropsInvalid(t *testing.T) {
	t.Parallel()
	table := pricing.NewTable([]schemas.ModelPrice{
		price("nan", math.NaN(), 1), price("neg", -1, 1), price("huge", 1, 1e9), price("bad\nname", 1, 1),
		price("ok", 1, 1), price(strings.Repeat("x", 300), 1, 1),
	})
	for _, m := range []string{"nan", "neg", "huge", "bad\nname", strings.Repeat("x", 300), ""} {
		if p, ok := table.Price(m); ok {
			t.Errorf("%q is priced %+v", m, p)
		}
	}
	if p, ok := table.Price("ok"); !ok || p != pr(1, 1) {
		t.Errorf("ok: %+v %v", p, ok)
	}
	if got := len(table.Records()); got != 1 {
		t.Errorf("%d records kept, want 1", got)
	}
}

// Check: a job under a limit (its budget or its tenant's spend per day)
// may ask only priced models; a job under none may ask anything.
func TestCheck(t *testing.T) {
	t.Parallel()
	table := pricing.NewTable([]schemas.ModelPrice{price("", 1, 1), price("big", 5, 20)})
	noDefault := pricing.NewTable([]schemas.ModelPrice{price("big", 5, 20)})
	tests := []struct {
		name    string
		table   pricing.Table
		spec    schemas.JobSpec
		perDay  float64
		missing []string // nil: accepted
	}{
		{"no limit, no table", pricing.Table{}, schemas.JobSpec{}, 0, nil},
		{"spend quota, no table", pricing.Table{}, schemas.JobSpec{Tenant: "t"}, 0.001, []string{"default"}},
		{"spend quota, pricing 0 claimed, no table", pricing.Table{}, schemas.JobSpec{Tenant: "t", Pricing: &schemas.Pricing{}}, 0.001, []string{"default"}},
		{"budget, no default record", noDefault, schemas.JobSpec{BudgetUSD: 1}, 0, []string{"default"}},
		{"spend quota, priced", table, schemas.JobSpec{}, 5, nil},
		{"stronger model unpriced", table, schemas.JobSpec{Escalation: &schemas.EscalationPolicy{StrongerModel: "bigger"}}, 5, []string{"bigger"}},
		{"stronger model priced", table, schemas.JobSpec{Escalation: &schemas.EscalationPolicy{StrongerModel: "big"}}, 5, nil},
		{"decorrelation models", table, schemas.JobSpec{Decorrelate: schemas.DecorrelateOn, Models: []string{"a", "big", "b"}}, 5, []string{"a", "b"}},
		{"models without decorrelation ask nothing", table, schemas.JobSpec{Decorrelate: schemas.DecorrelateOff, Models: []string{"a"}}, 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := pricing.Check(tt.table, &tt.spec, tt.perDay)
			if tt.missing == nil {
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
				return
			}
			if !errors.Is(err, pricing.ErrUnpriced) {
				t.Fatalf("Check = %v, want ErrUnpriced", err)
			}
			for _, m := range tt.missing {
				if !strings.Contains(err.Error(), `"`+m+`"`) {
					t.Errorf("Check = %v, want it to name %q", err, m)
				}
			}
			if got := pricing.Missing(tt.table, &tt.spec); !reflect.DeepEqual(got, tt.missing) {
				t.Errorf("Missing = %v, want %v", got, tt.missing)
			}
		})
	}
}
