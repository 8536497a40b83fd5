package pricing_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
)

// declared is a task instance that declares its p.
type declared struct {
	task.Instance
	p float64
}

func (d declared) PEstimate() float64 { return d.p }

func hanoi(t *testing.T, disks int) task.Instance {
	t.Helper()
	inst, err := builtin.Registry().Bind("hanoi", json.RawMessage(fmt.Sprintf(`{"disks":%d}`, disks)))
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

func TestForecast(t *testing.T) {
	t.Parallel()
	inst := hanoi(t, 4) // 15 steps
	price := &schemas.Pricing{InputUSDPerMTok: 0.4, OutputUSDPerMTok: 1.6}
	msgs, err := inst.Prompt(inst.Initial())
	if err != nil {
		t.Fatal(err)
	}
	bound := pricing.SampleBound(price, msgs, 750).USD()
	// The fleet's table prices the voters' own model at price: a job's
	// claim of 0 changes nothing.
	fleet := pricing.NewTable([]schemas.ModelPrice{{Header: schemas.NewHeader(schemas.KindModelPrice), Default: true,
		InputUSDPerMTok: price.InputUSDPerMTok, OutputUSDPerMTok: price.OutputUSDPerMTok}})
	noDefault := pricing.NewTable([]schemas.ModelPrice{{Header: schemas.NewHeader(schemas.KindModelPrice), Model: "big", InputUSDPerMTok: 1}})
	for _, tc := range []struct {
		name      string
		spec      schemas.JobSpec
		table     pricing.Table
		inst      task.Instance
		q         schemas.TenantQuota
		p         float64
		basis     string
		noCost    bool
		wantTime  bool
		wantSteps int64
	}{
		{name: "fleet's price, not the job's 0", spec: schemas.JobSpec{K: 3, Pricing: &schemas.Pricing{}}, table: fleet, inst: inst, p: pricing.DefaultP, basis: "priced at the fleet's price", wantSteps: 15},
		{name: "fleet's price, no claim", spec: schemas.JobSpec{K: 3}, table: fleet, inst: inst, p: pricing.DefaultP, basis: "priced at the fleet's price", wantSteps: 15},
		{name: "a table without the default record", spec: schemas.JobSpec{K: 3, Pricing: price}, table: noDefault, inst: inst, p: pricing.DefaultP, basis: "no price", noCost: true, wantSteps: 15},
		{name: "default p", spec: schemas.JobSpec{K: 3, Pricing: price}, inst: inst, p: pricing.DefaultP, basis: "assumed", wantSteps: 15},
		{name: "job's p", spec: schemas.JobSpec{K: 3, Pricing: price, PEstimate: 0.95}, inst: inst, p: 0.95, basis: "from the job", wantSteps: 15},
		{name: "task's p", spec: schemas.JobSpec{K: 3, Pricing: price}, inst: declared{inst, 0.9}, p: 0.9, basis: "declared by the task", wantSteps: 15},
		{name: "job's p wins", spec: schemas.JobSpec{K: 3, Pricing: price, PEstimate: 0.95}, inst: declared{inst, 0.9}, p: 0.95, basis: "from the job", wantSteps: 15},
		{name: "step limit", spec: schemas.JobSpec{K: 2, Pricing: price, StepLimit: 5}, inst: inst, p: pricing.DefaultP, basis: "assumed", wantSteps: 5},
		{name: "no pricing", spec: schemas.JobSpec{K: 3}, inst: inst, p: pricing.DefaultP, basis: "no price", noCost: true, wantSteps: 15},
		{name: "no table: the job's own, unverified", spec: schemas.JobSpec{K: 3, Pricing: price}, inst: inst, p: pricing.DefaultP, basis: "unverified", wantSteps: 15},
		{name: "rate", spec: schemas.JobSpec{K: 3, Pricing: price}, inst: inst, q: schemas.TenantQuota{SamplesPerSecond: 10}, p: pricing.DefaultP, basis: "10 samples/s", wantTime: true, wantSteps: 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := pricing.Forecast(tc.spec, tc.inst, tc.q, tc.table)
			if f.Steps != tc.wantSteps {
				t.Errorf("steps %d, want %d", f.Steps, tc.wantSteps)
			}
			if want := float64(tc.wantSteps) * plan.ExpectedVotes(tc.p, tc.spec.K); math.Abs(f.SamplesExpected-want) > 1e-9 {
				t.Errorf("samples %v, want %v (steps × E[N] at p=%v)", f.SamplesExpected, want, tc.p)
			}
			if !strings.Contains(f.Basis, tc.basis) {
				t.Errorf("basis %q does not say %q", f.Basis, tc.basis)
			}
			if tc.noCost {
				if f.CostUSD != 0 || f.CostLowUSD != 0 || f.CostHighUSD != 0 {
					t.Errorf("costs without pricing: %+v", f)
				}
			} else {
				if !(0 < f.CostLowUSD && f.CostLowUSD < f.CostUSD && f.CostUSD < f.CostHighUSD) {
					t.Errorf("band not ordered: low %v, expected %v, high %v", f.CostLowUSD, f.CostUSD, f.CostHighUSD)
				}
				// The high end is at least the reservations' bound for k
				// samples a step: what a budget must hold for the job to
				// finish even when every vote agrees at the longest reply.
				if min := float64(f.Steps) * float64(tc.spec.K) * bound; f.CostHighUSD < min {
					t.Errorf("high end %v below steps × k × the sample bound %v", f.CostHighUSD, min)
				}
			}
			if got := f.Seconds > 0; got != tc.wantTime {
				t.Errorf("time given %v, want %v: %+v", got, tc.wantTime, f)
			}
			if tc.wantTime && !(f.SecondsLow < f.Seconds && f.Seconds < f.SecondsHigh) {
				t.Errorf("time band not ordered: %+v", f)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	t.Parallel()
	inst := hanoi(t, 4)
	spec := schemas.JobSpec{K: 3, Pricing: &schemas.Pricing{InputUSDPerMTok: 0.4, OutputUSDPerMTok: 1.6}}
	f := pricing.Forecast(spec, inst, schemas.TenantQuota{}, pricing.Table{})
	for _, tc := range []struct {
		budget float64
		ok     bool
	}{{0, true}, {f.CostLowUSD / 2, false}, {f.CostLowUSD * 0.999, false}, {f.CostLowUSD, true}, {f.CostHighUSD, true}} {
		spec.BudgetUSD = tc.budget
		err := pricing.Admit(spec, f)
		if (err == nil) != tc.ok {
			t.Errorf("budget %v (forecast low %v): %v, want ok %v", tc.budget, f.CostLowUSD, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, pricing.ErrOverBudget) || !strings.Contains(err.Error(), "below the forecast's lowest cost")) {
			t.Errorf("refusal %q: want ErrOverBudget naming the lowest cost", err)
		}
	}
}
