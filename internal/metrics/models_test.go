package metrics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/makerfleet/makerfleet/internal/metrics"
)

// models is the set of model label values of fam.
func models(t *testing.T, reg *metrics.Registry, name string) map[string]float64 {
	t.Helper()
	fams, err := reg.Prometheus().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "model" {
					out[l.GetValue()] += sample(m)
				}
			}
		}
	}
	return out
}

func sample(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// A tenant naming a new model per job cannot mint label values: the first
// MaxModels models keep their names, the rest are counted as "other", in
// every metric with a model label.
func TestModelLabelsBounded(t *testing.T) {
	reg := metrics.NewRegistry("voter", "test")
	v := metrics.NewVoter(reg)
	c := metrics.NewCoordinator(reg)
	jt := c.Tenant("acme")
	const n = 3 * metrics.MaxModels
	for i := range n {
		model := fmt.Sprintf("tenant-model-%03d", i)
		v.Answered(model, "length")
		v.CallStarted()
		v.CallDone(context.Background(), model, time.Millisecond, nil)
		v.ModelError(model, context.DeadlineExceeded)
		v.NoUsage(model)
		jt.Tokens(model, 10, 1, 0.01)
		jt.Cost(model, 0.01)
	}
	for _, name := range []string{"maker_samples_answered_total", "maker_voter_red_flagged_total", "maker_model_latency_seconds",
		"maker_model_errors_total", "maker_tokens_total", "maker_cost_usd_total"} {
		got := models(t, reg, name)
		if len(got) != metrics.MaxModels+1 {
			t.Errorf("%s: %d model values, want %d + %q", name, len(got), metrics.MaxModels, metrics.OtherModel)
		}
		if _, ok := got["tenant-model-000"]; !ok {
			t.Errorf("%s: the first model lost its name", name)
		}
		if _, ok := got[fmt.Sprintf("tenant-model-%03d", metrics.MaxModels)]; ok {
			t.Errorf("%s: model %d kept its name", name, metrics.MaxModels)
		}
		total := 0.0
		for _, x := range got {
			total += x
		}
		if total == 0 || got[metrics.OtherModel] == 0 {
			t.Errorf("%s: %v, want the later models under %q", name, got, metrics.OtherModel)
		}
	}
	// Nothing is lost: every answer is counted, named or not.
	total := 0.0
	for _, x := range models(t, reg, "maker_samples_answered_total") {
		total += x
	}
	if total != n {
		t.Errorf("%v answers counted, want %d", total, n)
	}
	// A model already named stays named.
	v.Answered("tenant-model-000", "")
	if got := models(t, reg, "maker_samples_answered_total")["tenant-model-000"]; got != 2 {
		t.Errorf("tenant-model-000 answered %v, want 2", got)
	}
}

func TestNoUsageCode(t *testing.T) {
	reg := metrics.NewRegistry("voter", "test")
	v := metrics.NewVoter(reg)
	v.NoUsage("sim-1")
	var nilV *metrics.Voter
	nilV.NoUsage("sim-1")
	fams, err := reg.Prometheus().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() != "maker_model_errors_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == metrics.CodeNoUsage && m.GetCounter().GetValue() == 1 {
					return
				}
			}
		}
	}
	t.Errorf("no maker_model_errors_total{code=%q} 1", metrics.CodeNoUsage)
}
