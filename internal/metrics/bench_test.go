package metrics_test

import (
	"testing"

	"github.com/makerfleet/makerfleet/internal/metrics"
)

// BenchmarkStepHooks is what the metrics add to one decided step on the
// coordinator: a wave of requests, the decision, its counted figures and
// tokens. The nil case is a coordinator without metrics.
func BenchmarkStepHooks(b *testing.B) {
	for _, tc := range []struct {
		name string
		t    *metrics.CoordinatorTenant
	}{
		{"off", nil},
		{"on", metrics.NewCoordinator(metrics.NewRegistry("coordinator", "bench")).Tenant("acme")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				tc.t.SamplesRequested(3)
				tc.t.Decision("own_model", 1, 3, 3, true)
				tc.t.Counted(3, nil)
				tc.t.Tokens("sim-1", 300, 30, 0.001)
			}
		})
	}
}
