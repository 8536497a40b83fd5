package voter

import (
	"context"
	"testing"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/metrics"
)

// fixedModel answers every call with resp.
type fixedModel struct{ resp llm.Response }

func (f fixedModel) Complete(context.Context, llm.Request) (llm.Response, error) { return f.resp, nil }

// A reply whose usage the client estimated (a stream without usage) is
// counted as maker_model_errors_total{code="no_usage"}; one with usage is
// not.
func TestTimedModelNoUsage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		estimated bool
		want      float64
	}{{"usage", false, 0}, {"estimated", true, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			reg := metrics.NewRegistry("voter", "test")
			m := timedModel{Model: fixedModel{llm.Response{Choices: []llm.Choice{{Content: "x"}}, UsageEstimated: tc.estimated}},
				met: metrics.NewVoter(reg), model: "sim-1"}
			if _, err := m.Complete(context.Background(), llm.Request{}); err != nil {
				t.Fatal(err)
			}
			fams, err := reg.Prometheus().Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := 0.0
			for _, fam := range fams {
				if fam.GetName() != "maker_model_errors_total" {
					continue
				}
				for _, s := range fam.GetMetric() {
					for _, l := range s.GetLabel() {
						if l.GetName() == "code" && l.GetValue() == metrics.CodeNoUsage {
							got += s.GetCounter().GetValue()
						}
					}
				}
			}
			if got != tc.want {
				t.Errorf("no_usage errors %v, want %v", got, tc.want)
			}
		})
	}
}
