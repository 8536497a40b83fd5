package plan_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/makerfleet/makerfleet/internal/core/plan"
)

// TestClopperPearsonKnown: values from closed forms (x = 0 or n) and from
// the Beta quantiles computed with mpmath at 40 digits (they agree with R's
// binom.test).
func TestClopperPearsonKnown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		x, n     int64
		conf     float64
		low, hip float64
	}{
		{0, 0, 0.95, 0, 1},
		{0, 10, 0.95, 0, 1 - math.Pow(0.025, 0.1)},         // 0.3084971
		{10, 10, 0.95, math.Pow(0.025, 0.1), 1},            // 0.6915029
		{0, 1000, 0.99, 0, 1 - math.Pow(0.005, 0.001)},     // the rule of three's exact form
		{5, 10, 0.95, 0.187086028447, 0.812913971553},      // binom.test(5, 10)
		{1, 10, 0.95, 0.00252857854446, 0.445016117028},    // binom.test(1, 10)
		{50, 100, 0.95, 0.398321129503, 0.601678870497},    // binom.test(50, 100)
		{1996, 2000, 0.95, 0.994887191395, 0.999454806875}, // mpmath
	}
	for _, tt := range tests {
		iv, err := plan.ClopperPearson(tt.x, tt.n, tt.conf)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(iv.Low-tt.low) > 1e-9 || math.Abs(iv.High-tt.hip) > 1e-9 {
			t.Errorf("ClopperPearson(%d, %d, %v) = [%.9f, %.9f], want [%.9f, %.9f]", tt.x, tt.n, tt.conf, iv.Low, iv.High, tt.low, tt.hip)
		}
	}
}

func TestClopperPearsonRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		x, n int64
		conf float64
	}{{-1, 10, 0.95}, {11, 10, 0.95}, {1, -1, 0.95}, {1, 10, 0}, {1, 10, 1}, {1, 10, math.NaN()}, {1, 10, -0.5}} {
		if _, err := plan.ClopperPearson(c.x, c.n, c.conf); err == nil {
			t.Errorf("ClopperPearson(%d, %d, %v) accepted", c.x, c.n, c.conf)
		}
	}
}

// TestClopperPearsonShape: for every x of n the interval holds x/n, widens
// with the level and moves up with x; a million trials work.
func TestClopperPearsonShape(t *testing.T) {
	t.Parallel()
	const n = 40
	var prev plan.Interval
	for x := int64(0); x <= n; x++ {
		iv95, _ := plan.ClopperPearson(x, n, 0.95)
		iv99, _ := plan.ClopperPearson(x, n, 0.99)
		p := float64(x) / n
		if !(iv95.Low <= p && p <= iv95.High) {
			t.Errorf("x %d: [%v, %v] misses %v", x, iv95.Low, iv95.High, p)
		}
		if !(iv99.Low <= iv95.Low && iv95.High <= iv99.High) {
			t.Errorf("x %d: the 99 %% interval [%v, %v] is inside the 95 %% one [%v, %v]", x, iv99.Low, iv99.High, iv95.Low, iv95.High)
		}
		if x > 0 && !(iv95.Low > prev.Low && iv95.High > prev.High) {
			t.Errorf("x %d: [%v, %v] not above x-1's [%v, %v]", x, iv95.Low, iv95.High, prev.Low, prev.High)
		}
		prev = iv95
	}
	iv, err := plan.ClopperPearson(999_000, 1_000_000, 0.95)
	if err != nil || !(iv.Low > 0.9989 && iv.Low < 0.999 && iv.High > 0.999 && iv.High < 0.9991) {
		t.Errorf("a million trials: [%v, %v], %v", iv.Low, iv.High, err)
	}
}

// TestClopperPearsonCoverage: over 200 seeded repetitions of a binomial
// draw for each true p, the 95 % Clopper–Pearson interval covers the truth
// at least 93 % of the time (it is built to cover at least 95 %; 93 %
// leaves room for the binomial scatter of 200 repetitions, whose standard
// deviation is 1.5 %).
func TestClopperPearsonCoverage(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(95, 200))
	for _, tc := range []struct {
		p float64
		n int
	}{{0.5, 50}, {0.9, 200}, {0.99, 500}, {0.998, 2000}, {0.6, 1000}} {
		covered := 0
		const reps = 200
		for range reps {
			var x int64
			for range tc.n {
				if rng.Float64() < tc.p {
					x++
				}
			}
			iv, err := plan.ClopperPearson(x, int64(tc.n), 0.95)
			if err != nil {
				t.Fatal(err)
			}
			if iv.Low <= tc.p && tc.p <= iv.High {
				covered++
			}
		}
		if covered < reps*93/100 {
			t.Errorf("p %v, n %d: the 95 %% Clopper-Pearson interval covered %d of %d, want >= 93 %%", tc.p, tc.n, covered, reps)
		}
	}
}

func BenchmarkClopperPearson(b *testing.B) {
	for b.Loop() {
		_, _ = plan.ClopperPearson(1996, 2000, 0.95)
	}
}
