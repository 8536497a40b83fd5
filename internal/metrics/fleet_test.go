package metrics_test

import (
	"context"
	"math"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// sum adds the values (a histogram's counts, or its sums with sums) of
// name's samples whose labels include want.
func sum(fams map[string]*dto.MetricFamily, name string, want map[string]string, sums bool) float64 {
	var total float64
	fam := fams[name]
	if fam == nil {
		return 0
	}
next:
	for _, m := range fam.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil && sums:
			total += m.GetHistogram().GetSampleSum()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// TestFleetMetrics runs a known job (hanoi, 4 disks, k 3, a model that
// errs and malforms, priced) on an in-process fleet with metrics on,
// scrapes the coordinator's and the voters' /metrics over HTTP and checks
// the figures against the job's report.
func TestFleetMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fleet")
	}
	e := fleettest.New(t)
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 0.85, MalformedRate: 0.1, Seed: 11})
	client := fleettest.SimClient(t, sim, llm.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	creg := metrics.NewRegistry("coordinator", "test")
	creg.QueueLag(e.JS, metrics.Consumer{Stream: bus.DefaultNamespace.SamplesStream(), Name: bus.ConsumerVoters},
		metrics.Consumer{Stream: bus.DefaultNamespace.JobsStream(), Name: bus.ConsumerCoordinators})
	cm := metrics.NewCoordinator(creg)
	vreg := metrics.NewRegistry("voter", "test")
	vm := metrics.NewVoter(vreg)
	e.SetPrice("", schemas.Pricing{InputUSDPerMTok: 3, OutputUSDPerMTok: 15}) // the fleet's, which the metrics count
	e.StartCoordinator(coordinator.Config{Metrics: cm})
	e.StartVoter(client, voter.Config{ID: "voter-a", Metrics: vm})
	e.StartVoter(client, voter.Config{ID: "voter-b", Metrics: vm})
	csrv, err := metrics.Start(ctx, "127.0.0.1:0", creg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer csrv.Close()
	vsrv, err := metrics.Start(ctx, "127.0.0.1:0", vreg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer vsrv.Close()

	spec := fleettest.HanoiSpec(4, 3, 5)
	rep := e.Run(&spec)
	if rep.State != schemas.StateSolved || rep.Steps != 15 {
		t.Fatalf("state %s, %d steps: %s", rep.State, rep.Steps, rep.Reason)
	}
	if rep.RedFlagged == 0 {
		t.Fatalf("no red flag in %d samples: the test checks none", rep.Samples)
	}
	// The report is out before the coordinator counts the job finished
	// and lets go of its slot (maker_jobs_running).
	var c map[string]*dto.MetricFamily
	fleettest.Eventually(t, 10*time.Second, func() bool {
		c = scrape(t, csrv.URL())
		return sum(c, "maker_jobs_finished_total", nil, false) == 1 && sum(c, "maker_jobs_running", nil, false) == 0
	}, "maker_jobs_finished_total never 1 with maker_jobs_running 0")
	v := scrape(t, vsrv.URL())
	tenant := map[string]string{"tenant": spec.Tenant}
	steps := float64(rep.Steps)
	for _, tc := range []struct {
		what      string
		got, want float64
	}{
		{"jobs finished solved", sum(c, "maker_jobs_finished_total", map[string]string{"tenant": spec.Tenant, "state": "solved"}, false), 1},
		{"decisions", sum(c, "maker_decisions_total", tenant, false), steps},
		{"decisions by the own model", sum(c, "maker_decisions_total", map[string]string{"rung": "own_model"}, false), steps},
		{"votes", sum(c, "maker_votes_total", tenant, false), float64(rep.Votes)},
		{"red flags", sum(c, "maker_samples_red_flagged_total", tenant, false), float64(rep.RedFlagged)},
		{"step_samples count", sum(c, "maker_step_samples", tenant, false), steps},
		{"step_samples sum", sum(c, "maker_step_samples", tenant, true), float64(rep.Samples)},
		{"step_rounds count", sum(c, "maker_step_rounds", tenant, false), steps},
		{"step_margin count", sum(c, "maker_step_margin", tenant, false), steps},
		{"prompt tokens", sum(c, "maker_tokens_total", map[string]string{"kind": "prompt"}, false), float64(rep.PromptTokens)},
		{"completion tokens", sum(c, "maker_tokens_total", map[string]string{"kind": "completion"}, false), float64(rep.CompletionTokens)},
		{"jobs running", sum(c, "maker_jobs_running", nil, false), 0},
		{"escalations", sum(c, "maker_escalations_total", nil, false), 0},
		{"takeovers", sum(c, "maker_lease_takeovers_total", nil, false), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: metrics say %v, the report %v", tc.what, tc.got, tc.want)
		}
	}
	for why, n := range rep.RedFlags {
		if got := sum(c, "maker_samples_red_flagged_total", map[string]string{"reason": why}, false); got != float64(n) {
			t.Errorf("red flags %s: metrics %v, report %d", why, got, n)
		}
	}
	if got := sum(c, "maker_cost_usd_total", tenant, false); math.Abs(got-rep.CostUSD) > 1e-9 || rep.CostUSD == 0 {
		t.Errorf("cost: metrics %v, report %v", got, rep.CostUSD)
	}
	// Margin at decision: first-to-ahead-by-k decides with a lead of k.
	if got := sum(c, "maker_step_margin", tenant, true); got != steps*float64(spec.K) {
		t.Errorf("step_margin sum %v, want %v (lead k=%d at every step)", got, steps*float64(spec.K), spec.K)
	}
	requested := sum(c, "maker_samples_requested_total", tenant, false)
	answered := sum(v, "maker_samples_answered_total", nil, false)
	if answered < float64(rep.Samples) || requested < answered {
		t.Errorf("samples: requested %v >= answered %v >= counted %d does not hold", requested, answered, rep.Samples)
	}
	if got := sum(v, "maker_voter_red_flagged_total", map[string]string{"reason": schemas.RedFlagParse}, false); got < float64(rep.RedFlags[schemas.RedFlagParse]) {
		t.Errorf("voters red-flagged %v as parse, the report counted %d", got, rep.RedFlags[schemas.RedFlagParse])
	}
	if got := sum(v, "maker_model_latency_seconds", map[string]string{"model": simllm.DefaultModel}, false); got < float64(rep.Samples) {
		t.Errorf("model latency observed %v times, %d samples counted", got, rep.Samples)
	}
	if got := sum(v, "maker_voter_in_flight", nil, false); got != 0 {
		t.Errorf("in flight %v after the job", got)
	}
	for _, name := range []string{"maker_queue_pending_messages", "maker_queue_ack_pending_messages", "maker_build_info"} {
		if _, ok := c[name]; !ok {
			t.Errorf("coordinator's scrape has no %s", name)
		}
	}
}

// TestFleetMetricsEscalation: a step the job's own model cannot decide
// climbs to the stronger model; the metrics count the climb and the
// stronger model's decision, and price its tokens at its own price, as
// the report does.
func TestFleetMetricsEscalation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fleet")
	}
	const disks, k, jobSeed, hard = 3, 2, 47, 3
	e := fleettest.New(t)
	reg := metrics.NewRegistry("coordinator", "test")
	e.SetPrice("", schemas.Pricing{InputUSDPerMTok: 1, OutputUSDPerMTok: 2})
	e.SetPrice("strong", schemas.Pricing{InputUSDPerMTok: 10, OutputUSDPerMTok: 40})
	e.StartCoordinator(coordinator.Config{Metrics: metrics.NewCoordinator(reg)})
	// The own model splits its votes at step hard (no lead of 2 within 5
	// samples); the model named "strong" is always right.
	split := func(_ context.Context, c fleettest.Call) (llm.Response, error) {
		if c.Model == "" && c.Known && c.Step == hard && (c.Index%2 == 1 || c.Index == 4) {
			return fleettest.Say(fleettest.SameMoveWrongState(c)), nil
		}
		return fleettest.Right(c), nil
	}
	e.StartVoter(fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), split), voter.Config{Concurrency: 4})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.MaxSamplesPerStep = 5
	spec.Escalation = &schemas.EscalationPolicy{StrongerModel: "strong", StrongerSamples: 6}
	rep := e.Run(&spec)
	if rep.State != schemas.StateSolved || rep.Escalations != 1 {
		t.Fatalf("state %s, %d escalations: %s", rep.State, rep.Escalations, rep.Reason)
	}
	var c map[string]*dto.MetricFamily
	fleettest.Eventually(t, 10*time.Second, func() bool {
		c = gather(t, reg)
		return sum(c, "maker_jobs_finished_total", nil, false) == 1
	}, "maker_jobs_finished_total never 1")
	steps := float64(rep.Steps)
	for _, tc := range []struct {
		what      string
		got, want float64
	}{
		{"escalations to the stronger model", sum(c, "maker_escalations_total", map[string]string{"rung": "stronger_model"}, false), 1},
		{"decisions by the stronger model", sum(c, "maker_decisions_total", map[string]string{"rung": "stronger_model"}, false), 1},
		{"decisions by the own model", sum(c, "maker_decisions_total", map[string]string{"rung": "own_model"}, false), steps - 1},
		{"step_samples sum", sum(c, "maker_step_samples", nil, true), float64(rep.Samples)},
		{"votes", sum(c, "maker_votes_total", nil, false), float64(rep.Votes)},
		{"prompt tokens", sum(c, "maker_tokens_total", map[string]string{"kind": "prompt"}, false), float64(rep.PromptTokens)},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: metrics say %v, the report %v", tc.what, tc.got, tc.want)
		}
	}
	if got := sum(c, "maker_cost_usd_total", nil, false); math.Abs(got-rep.CostUSD) > 1e-9 || rep.CostUSD == 0 {
		t.Errorf("cost: metrics %v, report %v", got, rep.CostUSD)
	}
}

// gather reads reg without HTTP.
func gather(t *testing.T, reg *metrics.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Prometheus().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}
