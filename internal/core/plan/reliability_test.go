package plan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// The coordinator's policy values (internal/core/step/relstats.go), for the tests.
const (
	relZ       = 2.5758293035489004
	falseAlarm = 0.001
)

// TestWilson: the interval against textbook values (95 %, z = 1.96) and
// its invariants.
func TestWilson(t *testing.T) {
	cases := []struct {
		right, n, lo, hi float64
	}{
		{0, 10, 0, 0.2775},
		{10, 10, 0.7225, 1},
		{5, 10, 0.2366, 0.7634},
		{81, 263, 0.2553, 0.3662},
	}
	for _, c := range cases {
		est, lo, hi := Wilson(c.right, c.n, 1.959964)
		if math.Abs(lo-c.lo) > 5e-4 || math.Abs(hi-c.hi) > 5e-4 {
			t.Errorf("Wilson(%v/%v) = [%.4f, %.4f], want [%.4f, %.4f]", c.right, c.n, lo, hi, c.lo, c.hi)
		}
		if !(lo <= est && est <= hi) {
			t.Errorf("Wilson(%v/%v): estimate %v outside [%v, %v]", c.right, c.n, est, lo, hi)
		}
	}
	if est, lo, hi := Wilson(0, 0, relZ); est != 0.5 || lo != 0 || hi != 1 {
		t.Errorf("no evidence: %v [%v, %v], want 0.5 [0, 1]", est, lo, hi)
	}
}

// TestChooseKMatchesKMin: with no risk spent and every step left, the
// adaptive rule is the planner's k_min.
func TestChooseKMatchesKMin(t *testing.T) {
	for _, p := range []float64{0.55, 0.6, 0.75, 0.9, 0.99, 0.998, 0.9999} {
		for _, s := range []int64{1, 10, 1023, 1 << 20} {
			for _, target := range []float64{0.5, 0.95, 0.999} {
				want, err := KMin(p, s, target)
				if err != nil || want > schemas.MaxK {
					continue
				}
				got, reached := ChooseK(p, 0, s, target, 1, schemas.MaxK)
				if got != want || !reached {
					t.Errorf("ChooseK(p=%v, s=%d, t=%v) = %d (reached %v), want k_min %d", p, s, target, got, reached, want)
				}
			}
		}
	}
}

// TestChooseK: the risk already spent, the floor and the ceiling.
func TestChooseK(t *testing.T) {
	// p = 0.9: p_vote(3) = 0.99863, p_vote(4) = 0.99985, p_vote(5) = 0.999983.
	lp := func(k int) float64 { return LogPVote(0.9, k) }
	cases := []struct {
		name    string
		logPast float64
		left    int64
		target  float64
		lo, hi  int
		want    int
		reached bool
	}{
		{"fresh", 0, 100, 0.95, 1, 1000, 4, true},
		{"past steps at a high k leave room", 1000 * lp(9), 100, 0.95, 1, 1000, 4, true},
		{"past steps at a low k spend the risk", 30 * lp(3), 100, 0.95, 1, 1000, 5, true},
		{"the floor holds", 0, 100, 0.95, 6, 1000, 6, true},
		{"the ceiling holds, out of reach", 0, 100, 0.95, 1, 3, 3, false},
		{"the past spent it all: the rest alone", 50 * lp(1), 100, 0.95, 1, 1000, 4, false},
		{"last step", 0, 1, 0.95, 1, 1000, 2, true},
	}
	for _, c := range cases {
		k, reached := ChooseK(0.9, c.logPast, c.left, c.target, c.lo, c.hi)
		if k != c.want || reached != c.reached {
			t.Errorf("%s: k %d (reached %v), want %d (%v)", c.name, k, reached, c.want, c.reached)
		}
		if reached {
			if got := c.logPast + float64(c.left)*LogPVote(0.9, k); got < math.Log(c.target) {
				t.Errorf("%s: k %d gives %v < ln t", c.name, k, got)
			}
		}
	}
}

// TestLogPVote: ln p_vote matches 1/(1+r^k) on both sides of 0.5.
func TestLogPVote(t *testing.T) {
	for _, p := range []float64{0.01, 0.3, 0.5, 0.7, 0.9978} {
		for _, k := range []int{1, 3, 10, 200} {
			r := (1 - p) / p
			want := -math.Log1p(math.Pow(r, float64(k)))
			if got := LogPVote(p, k); math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) && !math.IsInf(want, -1) {
				t.Errorf("LogPVote(%v, %d) = %v, want %v", p, k, got, want)
			}
		}
	}
}

// survival is the chance a two-candidate race (margin k, valid with
// chance v, right with chance p) is undecided after n samples.
func survival(k int, p, v float64, n int) float64 {
	w := 2*k - 1
	cur := make([]float64, w)
	cur[k-1] = 1
	for range n {
		next := make([]float64, w)
		for i := range next {
			next[i] = (1 - v) * cur[i]
			if i > 0 {
				next[i] += v * p * cur[i-1]
			}
			if i < w-1 {
				next[i] += v * (1 - p) * cur[i+1]
			}
		}
		cur = next
	}
	s := 0.0
	for _, x := range cur {
		s += x
	}
	return s
}

// TestRaceQuantile: the threshold is the smallest n with survival <=
// alpha, grows as p falls (the test's conservative rounding relies on
// it), and is capped.
func TestRaceQuantile(t *testing.T) {
	for _, c := range []struct {
		k    int
		p, v float64
	}{{1, 0.9, 1}, {2, 0.75, 1}, {3, 0.998, 1}, {3, 0.9, 0.8}, {6, 0.6, 1}, {4, 0.51, 0.5}} {
		q := RaceQuantile(c.k, c.p, c.v, falseAlarm, 100_000)
		if s := survival(c.k, c.p, c.v, q); s > falseAlarm {
			t.Errorf("k=%d p=%v v=%v: survival after q=%d is %v > %v", c.k, c.p, c.v, q, s, falseAlarm)
		}
		if s := survival(c.k, c.p, c.v, q-1); s <= falseAlarm {
			t.Errorf("k=%d p=%v v=%v: q=%d is not the smallest (survival after %d is %v)", c.k, c.p, c.v, q, q-1, s)
		}
		prev := 0
		for _, p := range []float64{0.99, 0.95, 0.9, 0.8, 0.7, 0.6, 0.55} {
			if q := RaceQuantile(c.k, p, c.v, falseAlarm, 100_000); q < prev {
				t.Errorf("k=%d v=%v: threshold %d at p=%v below %d at a larger p", c.k, c.v, q, p, prev)
			} else {
				prev = q
			}
		}
	}
	// The paper's run: k = 3, p = 0.998: a step is flagged past 5 samples
	// (its 18-round step would be).
	if q := RaceQuantile(3, 0.998, 1, falseAlarm, 100); q != 5 {
		t.Errorf("k=3 p=0.998: threshold %d, want 5", q)
	}
	if q := RaceQuantile(20, 0.51, 1, falseAlarm, 100); q != 100 {
		t.Errorf("capped: threshold %d, want the cap 100", q)
	}
	if p := QuantP(0.9); p > 0.9 || p < 0.895 {
		t.Errorf("QuantP(0.9) = %v: must round down, by less than a grid step", p)
	}
}

// TestFalseAlarmRate measures the correlation test's false alarms on
// simulated independent votes (seeded): the share of steps still
// undecided past the threshold must not be significantly above
// falseAlarm (its 99.9 % Wilson lower bound below it), for the
// two-candidate race and for wrong votes spread over three answers, at p
// = p_low and above it. The printed figures are docs/statistics.md's.
func TestFalseAlarmRate(t *testing.T) {
	const steps = 200_000
	rng := rand.New(rand.NewPCG(12, 34))
	for _, c := range []struct {
		k          int
		pLow, p, v float64
		spread     int
	}{
		{3, 0.9, 0.9, 1, 1}, {2, 0.75, 0.75, 1, 1}, {3, 0.9, 0.9, 0.8, 1}, {4, 0.8, 0.8, 1, 3}, {3, 0.9, 0.95, 1, 1},
	} {
		q := RaceQuantile(c.k, c.pLow, c.v, falseAlarm, 1000)
		alarms := 0
		for range steps {
			if raceSamples(rng, c.k, c.p, c.v, c.spread, q+1) > q {
				alarms++
			}
		}
		_, lo, hi := Wilson(float64(alarms), steps, 3.2905) // 99.9 %, two-sided
		t.Logf("k=%d p_low=%v p=%v v=%v spread=%d: threshold %d samples, false alarms %d/%d = %.5f [%.5f, %.5f] (alpha %v)",
			c.k, c.pLow, c.p, c.v, c.spread, q, alarms, steps, float64(alarms)/steps, lo, hi, falseAlarm)
		if lo > falseAlarm {
			t.Errorf("k=%d p=%v: false-alarm rate %v significantly above %v (99.9 %% Wilson interval [%v, %v])",
				c.k, c.p, float64(alarms)/steps, falseAlarm, lo, hi)
		}
	}
}

// raceSamples draws one step's race (wrong votes spread evenly over
// spread wrong answers) and returns its samples, at most limit.
func raceSamples(rng *rand.Rand, k int, p, v float64, spread, limit int) int {
	votes := make([]int, spread+1) // 0: the right answer
	for n := 1; n <= limit; n++ {
		if rng.Float64() >= v {
			continue
		}
		if rng.Float64() < p {
			votes[0]++
		} else {
			votes[1+rng.IntN(spread)]++
		}
		first, second := 0, 0
		for _, x := range votes {
			if x > first {
				first, second = x, first
			} else if x > second {
				second = x
			}
		}
		if first-second >= k {
			return n
		}
	}
	return limit
}
