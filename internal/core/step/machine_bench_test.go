package step

import "testing"

// BenchmarkMachineStep measures the step machine's own work per decided
// step, without servers: a walk of 1000 steps at k 3, every answer
// right, each wave's results delivered as one batch (decoded, screened,
// recorded in the reference tally, decided), as the shell hands them over.
func BenchmarkMachineStep(b *testing.B) {
	const steps = 1000
	var decided int64
	for b.Loop() {
		h := newHarness(b, spec(3, 100), steps, byIndex(rightAns))
		h.start()
		h.run()
		if e := h.m.End; e == nil || h.m.Acct.Steps != steps {
			b.Fatalf("end %+v after %d steps", e, h.m.Acct.Steps)
		}
		decided += h.m.Acct.Steps
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(decided), "ns/step")
}
