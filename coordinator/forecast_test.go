package coordinator_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/calibrate"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// forecastCase is one job whose forecast is checked against its cost.
type forecastCase struct {
	name, src, params string // src: an example spec file ("": hanoi)
}

func forecastCases(t testing.TB, disks ...int) []forecastCase {
	var cs []forecastCase
	for _, d := range disks {
		cs = append(cs, forecastCase{name: "hanoi " + itoa(d), params: `{"disks":` + itoa(d) + `}`})
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "examples", "tasks", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return append(cs,
		forecastCase{"multiply", read("multiply.yaml"), `{"a":"31415926","b":"2718"}`},
		forecastCase{"classify", read("classify.yaml"), read("classify.params.json")},
		forecastCase{"ledger", read("ledger.yaml"), read("ledger.params.json")},
		forecastCase{"hanoi spec", read("hanoi.yaml"), `{"disks":5}`},
	)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// forecastVsCost runs each case on the simulated model after calibrating
// it there, and returns the central forecast and the cost of each job,
// at the fleet's price table.
func forecastVsCost(t testing.TB, cases []forecastCase) (forecast, floor, cost []float64) {
	f := &specFleet{env: fleettest.New(t), clog: &lineBuffer{}, vlog: &lineBuffer{}}
	f.env.StartCoordinator(coordinator.Config{Logger: slog.New(slog.NewTextHandler(f.clog, nil))})
	sim := simllm.Config{Seed: 3, Tasks: f.env.Fleet.Registry}
	rn := fleettest.StartSim(t, sim)
	client := fleettest.SimClient(t, rn, llm.Config{})
	f.startVoter(client, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := pricetable.Set(ctx, f.env.Topo.Prices, schemas.ModelPrice{Default: true, InputUSDPerMTok: 0.4, OutputUSDPerMTok: 1.6}); err != nil {
		t.Fatal(err)
	}
	table, err := pricetable.Load(ctx, f.env.Topo.Prices)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		var spec schemas.JobSpec
		if c.src == "" {
			spec = fleettest.HanoiSpec(0, 3, 3)
			spec.Params = json.RawMessage(c.params)
		} else {
			spec = f.job(t, c.src, c.params, 3)
		}
		spec.Seed = 3
		inst, err := task.BindRef(ctx, f.env.Fleet.Registry, jobs.TaskRef(spec), spec.Params)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cal, err := calibrate.Run(ctx, inst, client, calibrate.Config{Task: jobs.TaskRef(spec), Model: simllm.DefaultModel,
			Samples: 300, Seed: 11, SimHints: c.src != ""})
		if err != nil {
			t.Fatalf("%s: calibrate: %v", c.name, err)
		}
		guess := pricing.Forecast(spec, inst, schemas.TenantQuota{}, table)
		cal.ApplyTo(&spec)
		spec.ApplyDefaults()
		fc := pricing.Forecast(spec, inst, schemas.TenantQuota{}, table)
		rep := f.env.Run(&spec)
		if rep.State != schemas.StateSolved {
			t.Fatalf("%s: %s", c.name, rep.State)
		}
		forecast, floor, cost = append(forecast, fc.CostUSD), append(floor, guess.CostLowUSD), append(cost, rep.CostUSD)
		t.Logf("%-10s calibrated forecast $%.5f (low $%.5f, high $%.5f), cost $%.5f: %+.0f%%; uncalibrated $%.5f (%+.0f%%), its floor $%.5f; %d samples over %d steps, %d+%d tokens",
			c.name, fc.CostUSD, fc.CostLowUSD, fc.CostHighUSD, rep.CostUSD, 100*(fc.CostUSD/rep.CostUSD-1),
			guess.CostUSD, 100*(guess.CostUSD/rep.CostUSD-1), guess.CostLowUSD,
			rep.Samples, rep.Steps, rep.PromptTokens, rep.CompletionTokens)
	}
	return forecast, floor, cost
}

// TestForecastHolds: on the simulated model, calibrated there, a job's
// central forecast is within 25 % of what it cost (hanoi of 5 and 8 disks
// and every example spec; BenchmarkForecast runs 5 to 12 disks), and the
// floor of its uncalibrated forecast, which refuses budgets at submit, is
// below the cost (a guess never refuses a budget the job fits in).
func TestForecastHolds(t *testing.T) {
	t.Parallel()
	cases := forecastCases(t, 5, 8)
	forecast, floor, cost := forecastVsCost(t, cases)
	for i, c := range cases {
		if cost[i] <= 0 || math.Abs(forecast[i]/cost[i]-1) > 0.25 {
			t.Errorf("%s: forecast $%.5f, cost $%.5f: off by more than 25%%", c.name, forecast[i], cost[i])
		}
		if floor[i] > cost[i] {
			t.Errorf("%s: the uncalibrated floor $%.5f is above the cost $%.5f", c.name, floor[i], cost[i])
		}
	}
}

// BenchmarkForecast prints, for hanoi of 5 to 12 disks and every example
// spec on the simulated model, the calibrated forecast beside the cost of
// the run (and the uncalibrated guess beside both). Run with
// -benchtime=1x.
func BenchmarkForecast(b *testing.B) {
	cases := forecastCases(b, 5, 6, 7, 8, 9, 10, 11, 12)
	forecast, _, cost := forecastVsCost(b, cases)
	worst := 0.0
	for i := range cases {
		worst = math.Max(worst, math.Abs(forecast[i]/cost[i]-1))
	}
	b.ReportMetric(100*worst, "worst_off_%")
}
