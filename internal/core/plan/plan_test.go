package plan_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

const paperSteps = 1<<20 - 1 // 20 disks

func TestPaperFigures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		p         float64
		target    float64 // 0: Compute's default, 0.95
		wantKMin  int
		wantVotes float64 // 0: not checked
		wantPFull float64 // 0: not checked
	}{
		{"gpt-4.1-mini rate", 0.998, 0.95, 3, 3.01, 0.9916},
		{"default target", 0.998, 0, 3, 3.01, 0.9916},
		{"p 0.99", 0.99, 0.95, 4, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pl, err := plan.Compute(plan.Input{P: tt.p, Steps: paperSteps, Target: tt.target})
			if err != nil {
				t.Fatal(err)
			}
			if pl.KMin != tt.wantKMin || pl.K != tt.wantKMin {
				t.Errorf("k_min = %d, k = %d, want %d", pl.KMin, pl.K, tt.wantKMin)
			}
			if tt.wantVotes != 0 && math.Abs(pl.ExpectedVotesPerStep-tt.wantVotes) > 0.005 {
				t.Errorf("E[N] = %v, want about %v", pl.ExpectedVotesPerStep, tt.wantVotes)
			}
			if tt.wantPFull != 0 && math.Abs(pl.PFull-tt.wantPFull) > 0.00005 {
				t.Errorf("p_full = %v, want about %v", pl.PFull, tt.wantPFull)
			}
			if pl.PFull < 0.95 || !pl.MeetsTarget {
				t.Errorf("p_full = %v, meets_target = %v: k_min must reach the target", pl.PFull, pl.MeetsTarget)
			}
			k, err := plan.KMin(tt.p, paperSteps, 0.95)
			if err != nil || k != tt.wantKMin {
				t.Errorf("KMin = %d, %v, want %d", k, err, tt.wantKMin)
			}
		})
	}
}

// stepGrid is s = 10..2^30: powers of ten and of two, sorted.
func stepGrid() []int64 {
	var ss []int64
	for s := int64(10); s <= 1<<30; s *= 10 {
		ss = append(ss, s)
	}
	for j := 4; j <= 30; j++ {
		ss = append(ss, 1<<j, 1<<j-1)
	}
	slices.Sort(ss)
	return slices.Compact(ss)
}

func TestKMinGrowsLikeLogSteps(t *testing.T) {
	t.Parallel()
	for _, p := range []float64{0.6, 0.9, 0.99, 0.998, 0.999999} {
		for _, target := range []float64{0.5, 0.95, 0.999} {
			prev := 0
			for _, s := range stepGrid() {
				k, err := plan.KMin(p, s, target)
				if err != nil {
					t.Fatalf("KMin(%v, %d, %v): %v", p, s, target, err)
				}
				if k < prev {
					t.Errorf("KMin(%v, %d, %v) = %d, below %d for fewer steps", p, s, target, k, prev)
				}
				prev = k
				// For large s, t^(−1/s) − 1 ≈ −ln(t)/s, so
				// k_min ≈ (ln s − ln(−ln t)) / ln(1/r): Θ(ln s).
				approx := (math.Log(float64(s)) - math.Log(-math.Log(target))) / math.Log(p/(1-p))
				lo, hi := math.Max(1, approx-0.01), math.Max(1, approx+1.01)
				if float64(k) < lo || float64(k) > hi {
					t.Errorf("KMin(%v, %d, %v) = %d, want in [%.3f, %.3f]", p, s, target, k, lo, hi)
				}
			}
		}
	}
}

// TestKMinTight checks the definition on random input: k_min reaches the
// target and k_min − 1 does not.
func TestKMinTight(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(2511, 9030))
	for range 3000 {
		p := 1 - 0.5*math.Pow(10, -6*rng.Float64()) // 1−p log-uniform in [5e-7, 0.5]
		if p <= 0.5 || p >= 1 {
			continue
		}
		s := int64(math.Pow(2, 30*rng.Float64()))
		target := 0.01 + 0.9899*rng.Float64()
		k, err := plan.KMin(p, s, target)
		if err != nil {
			t.Fatalf("KMin(%v, %d, %v): %v", p, s, target, err)
		}
		if got := plan.PFull(p, k, s); !(got >= target) {
			t.Errorf("KMin(%v, %d, %v) = %d but PFull = %v < target", p, s, target, k, got)
		}
		if k > 1 {
			if got := plan.PFull(p, k-1, s); !(got < target) {
				t.Errorf("KMin(%v, %d, %v) = %d but PFull(k−1) = %v already reaches target", p, s, target, k, got)
			}
		}
	}
}

// TestKMinBoundaryExact puts the target one float64 either side of the exact
// p_full(k), computed with rationals: the side decides k or k+1, with no
// room for rounding.
func TestKMinBoundaryExact(t *testing.T) {
	t.Parallel()
	naiveWrong := 0
	for _, p := range []float64{0.6, 0.75, 0.9, 0.99, 0.998, 0.999999} {
		for _, k := range []int{1, 2, 3, 5} {
			for _, s := range []int64{1, 2, 7, 20} {
				star := exactPFull(p, k, s)
				lo, _ := star.Float64()
				if new(big.Rat).SetFloat64(lo).Cmp(star) > 0 {
					lo = math.Nextafter(lo, 0)
				}
				hi := math.Nextafter(lo, 1)
				if hi >= 1 {
					continue // p_full(k) rounds to 1: no float target above it
				}
				if got, err := plan.KMin(p, s, lo); err != nil || got != k {
					t.Errorf("KMin(%v, %d, %v) = %d, %v; want %d (target at or below exact p_full(%d))", p, s, lo, got, err, k, k)
				}
				if got, err := plan.KMin(p, s, hi); err != nil || got != k+1 {
					t.Errorf("KMin(%v, %d, %v) = %d, %v; want %d (target just above exact p_full(%d))", p, s, hi, got, err, k+1, k)
				}
				if naiveKMin(p, s, lo) != k {
					naiveWrong++
				}
				if naiveKMin(p, s, hi) != k+1 {
					naiveWrong++
				}
			}
		}
	}
	t.Logf("a plain float64 ceil gets %d of these boundary cases wrong", naiveWrong)
}

// TestKMinBoundaryNoise: at the paper's size, a target that puts the exact
// k at 3 ± 1e-10 or 3 ± 1e-12 gives 3 below and 4 above, and float targets
// within a few ulps of p_full(3) switch from 3 to 4 exactly once.
func TestKMinBoundaryNoise(t *testing.T) {
	t.Parallel()
	const p, s = 0.998, int64(paperSteps)
	for _, d := range []float64{1e-6, 1e-10, 1e-12} {
		below, above := pFullReal(p, 3-d, s), pFullReal(p, 3+d, s)
		if below >= above {
			t.Fatalf("d = %v: targets %v, %v not ordered; test too fine for float64", d, below, above)
		}
		if k, _ := plan.KMin(p, s, below); k != 3 {
			t.Errorf("exact k = 3 − %v: KMin = %d, want 3", d, k)
		}
		if k, _ := plan.KMin(p, s, above); k != 4 {
			t.Errorf("exact k = 3 + %v: KMin = %d, want 4", d, k)
		}
	}
	t0 := plan.PFull(p, 3, s)
	for range 8 {
		t0 = math.Nextafter(t0, 0)
	}
	var ks []int
	for range 17 {
		k, err := plan.KMin(p, s, t0)
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, k)
		t0 = math.Nextafter(t0, 1)
	}
	if ks[0] != 3 || ks[len(ks)-1] != 4 || !slices.IsSorted(ks) {
		t.Errorf("KMin over 17 targets around p_full(3) = %v, want 3s then 4s", ks)
	}
}

func TestPVotePFull(t *testing.T) {
	t.Parallel()
	for _, p := range []float64{0.51, 0.6, 0.9, 0.998, 0.999999} {
		r := (1 - p) / p
		for _, k := range []int{0, 1, 2, 3, 7} {
			want := 1 / (1 + math.Pow(r, float64(k)))
			if got := plan.PVote(p, k); math.Abs(got-want) > 1e-14 {
				t.Errorf("PVote(%v, %d) = %v, want %v", p, k, got, want)
			}
			if got := plan.PFull(p, k, 1); math.Abs(got-want) > 1e-14 {
				t.Errorf("PFull(%v, %d, 1) = %v, want PVote %v", p, k, got, want)
			}
			if got := plan.PFull(p, k, 0); got != 1 {
				t.Errorf("PFull(%v, %d, 0) = %v, want 1", p, k, got)
			}
		}
	}
	// r^k = 1e-18 vanishes next to 1, so a plain pow(p_vote, s) says 1;
	// the stable form keeps the 2^30·1e-18 loss.
	got := plan.PFull(0.999999, 3, 1<<30)
	r3 := math.Pow((1-0.999999)/0.999999, 3)
	want := math.Exp(-float64(1<<30) * r3)
	if math.Abs(got-want) > 1e-15 || got == 1 {
		t.Errorf("PFull(0.999999, 3, 2^30) = %.17g, want %.17g", got, want)
	}
}

func TestExpectedVotes(t *testing.T) {
	t.Parallel()
	// p = 0.8, k = 3: r = 1/4, E[N] = 3/0.6 · (63/64)/(65/64) = 5·63/65.
	if got, want := plan.ExpectedVotes(0.8, 3), 5.0*63/65; math.Abs(got-want) > 1e-12 {
		t.Errorf("ExpectedVotes(0.8, 3) = %v, want %v", got, want)
	}
	ps := []float64{0.5000001, 0.51, 0.6, 0.75, 0.9, 0.99, 0.998, 0.9999, 0.999999}
	for _, k := range []int{0, 1, 2, 3, 5, 10, 40} {
		prevGap := math.Inf(1)
		for _, p := range ps {
			en := plan.ExpectedVotes(p, k)
			short := float64(k) / (2*p - 1)
			if en > short*(1+1e-12) {
				t.Errorf("ExpectedVotes(%v, %d) = %v exceeds shortcut %v", p, k, en, short)
			}
			if k == 1 && math.Abs(en-1) > 1e-9 {
				t.Errorf("ExpectedVotes(%v, 1) = %v, want 1: one vote decides", p, en)
			}
			if en < float64(k)*(1-1e-12) {
				t.Errorf("ExpectedVotes(%v, %d) = %v, below k: a race needs k votes", p, k, en)
			}
			// As p → 1 every vote goes one way: E[N] → k.
			gap := en - float64(k)
			if gap > prevGap+1e-12*float64(k) {
				t.Errorf("ExpectedVotes(%v, %d) − k = %v, grew from %v as p rose", p, k, gap, prevGap)
			}
			prevGap = gap
		}
		if gap := plan.ExpectedVotes(0.999999, k) - float64(k); gap > 1e-5*float64(k) {
			t.Errorf("ExpectedVotes(0.999999, %d) − k = %v, want → 0", k, gap)
		}
	}
}

// TestExpectedVotesMonteCarlo simulates first-to-ahead-by-k races between a
// right and a wrong answer and compares the mean length with E[N] and the
// win rate with p_vote.
func TestExpectedVotesMonteCarlo(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(20, 1<<20-1))
	const races = 5000
	for _, tc := range []struct {
		p float64
		k int
	}{{0.55, 2}, {0.6, 3}, {0.8, 3}, {0.9, 5}, {0.998, 3}} {
		var sum, sumSq float64
		wins := 0
		for range races {
			n, right := race(rng, tc.p, tc.k)
			sum += float64(n)
			sumSq += float64(n) * float64(n)
			if right {
				wins++
			}
		}
		mean := sum / races
		se := math.Sqrt((sumSq/races - mean*mean) / races)
		want := plan.ExpectedVotes(tc.p, tc.k)
		if math.Abs(mean-want) > 4*se+1e-9 {
			t.Errorf("p %v k %d: simulated mean %v ± %v, ExpectedVotes %v", tc.p, tc.k, mean, se, want)
		}
		pv := plan.PVote(tc.p, tc.k)
		rate := float64(wins) / races
		if math.Abs(rate-pv) > 4*math.Sqrt(pv*(1-pv)/races)+1e-9 {
			t.Errorf("p %v k %d: simulated win rate %v, PVote %v", tc.p, tc.k, rate, pv)
		}
	}
}

// race draws votes until one answer leads the other by k and returns the
// number of votes and whether the right answer won.
func race(rng *rand.Rand, p float64, k int) (votes int, right bool) {
	var v [2]int // v[0] right, v[1] wrong
	for {
		if rng.Float64() < p {
			v[0]++
		} else {
			v[1]++
		}
		votes++
		switch {
		case v[0] >= k+v[1]:
			return votes, true
		case v[1] >= k+v[0]:
			return votes, false
		}
	}
}

func TestComputeCost(t *testing.T) {
	t.Parallel()
	base := plan.Input{P: 0.998, Steps: paperSteps, InputUSDPerMTok: 0.4, OutputUSDPerMTok: 1.6}
	pl := mustCompute(t, base)
	// Defaults: 600 input and 300 output tokens.
	if pl.InputTokens != 600 || pl.OutputTokens != 300 || pl.ValidFraction != 1 || pl.Target != 0.95 {
		t.Errorf("defaults: %+v", pl)
	}
	if want := (600*0.4 + 300*1.6) / 1e6; math.Abs(pl.CostPerCallUSD-want) > 1e-15 {
		t.Errorf("cost per call = %v, want %v", pl.CostPerCallUSD, want)
	}
	want := pl.CostPerCallUSD * float64(paperSteps) * pl.ExpectedVotesPerStep
	if math.Abs(pl.ExpectedCost-want) > 1e-9*want {
		t.Errorf("expected cost = %v, want c·s·E[N] = %v", pl.ExpectedCost, want)
	}
	if math.Abs(pl.ExpectedCost-pl.CostPerCallUSD*pl.ExpectedTotalSamples) > 1e-9*want {
		t.Errorf("expected cost %v ≠ c · total samples %v", pl.ExpectedCost, pl.CostPerCallUSD*pl.ExpectedTotalSamples)
	}

	// A peer's estimate ignored input tokens: they must count.
	in := base
	in.InputTokens = 1200
	if got := mustCompute(t, in).ExpectedCost; !(got > pl.ExpectedCost) {
		t.Errorf("doubling input tokens: cost %v, not above %v", got, pl.ExpectedCost)
	}
	in = base
	in.OutputTokens = 600
	if got := mustCompute(t, in).ExpectedCost; !(got > pl.ExpectedCost) {
		t.Errorf("doubling output tokens: cost %v, not above %v", got, pl.ExpectedCost)
	}
	// Red-flagged samples are paid for: half valid, twice the samples.
	in = base
	in.ValidFraction = 0.5
	got := mustCompute(t, in)
	if math.Abs(got.ExpectedCost-2*pl.ExpectedCost) > 1e-9*pl.ExpectedCost ||
		math.Abs(got.ExpectedSamplesPerStep-2*got.ExpectedVotesPerStep) > 1e-12 {
		t.Errorf("v = 0.5: cost %v (want %v), samples/step %v", got.ExpectedCost, 2*pl.ExpectedCost, got.ExpectedSamplesPerStep)
	}
	// No prices, no cost.
	if got := mustCompute(t, plan.Input{P: 0.998, Steps: paperSteps}); got.ExpectedCost != 0 || got.CostPerCallUSD != 0 {
		t.Errorf("no prices: cost %v, per call %v", got.ExpectedCost, got.CostPerCallUSD)
	}

	// A peer's estimate ignored p: cost must rise as p falls, both with
	// k_min (which grows) and with a fixed k.
	for _, k := range []int{0, 3} {
		prev := 0.0
		for _, p := range []float64{0.999999, 0.9999, 0.998, 0.99, 0.95, 0.8, 0.6, 0.51} {
			in := base
			in.P, in.K = p, k
			c := mustCompute(t, in).ExpectedCost
			if !(c > prev) {
				t.Errorf("k %d, p %v: cost %v, not above %v for a higher p", k, p, c, prev)
			}
			prev = c
		}
	}
}

func TestComputeGivenK(t *testing.T) {
	t.Parallel()
	pl := mustCompute(t, plan.Input{P: 0.998, Steps: paperSteps, K: 2})
	if pl.K != 2 || pl.KMin != 3 || pl.MeetsTarget {
		t.Errorf("k = %d, k_min = %d, meets = %v; want 2, 3, false", pl.K, pl.KMin, pl.MeetsTarget)
	}
	if !(pl.PFull < pl.Target) || !(pl.PFullKMin >= pl.Target) {
		t.Errorf("p_full = %v, p_full_k_min = %v, target %v", pl.PFull, pl.PFullKMin, pl.Target)
	}
	if pl.ShortcutVotesPerStep != 2/(2*0.998-1) {
		t.Errorf("shortcut = %v", pl.ShortcutVotesPerStep)
	}
}

// TestComputeStable runs the extremes the brief asks for: no NaN or Inf,
// probabilities in [0, 1].
func TestComputeStable(t *testing.T) {
	t.Parallel()
	for _, p := range []float64{0.500001, 0.51, 0.6, 0.9, 0.99, 0.998, 0.999999} {
		for _, s := range []int64{1, 2, 1 << 20, 1<<30 - 1, 1 << 30} {
			for _, target := range []float64{1e-9, 0.5, 0.95, 0.999999} {
				pl := mustCompute(t, plan.Input{P: p, Steps: s, Target: target, InputUSDPerMTok: 1, OutputUSDPerMTok: 1})
				for name, v := range map[string]float64{
					"p_vote": pl.PVote, "p_full": pl.PFull, "e_n": pl.ExpectedVotesPerStep,
					"shortcut": pl.ShortcutVotesPerStep, "samples": pl.ExpectedTotalSamples, "cost": pl.ExpectedCost,
				} {
					if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
						t.Errorf("p %v s %d t %v: %s = %v", p, s, target, name, v)
					}
				}
				if pl.PFull > 1 || pl.PVote > 1 || pl.PFull < target {
					t.Errorf("p %v s %d t %v: p_vote %v p_full %v", p, s, target, pl.PVote, pl.PFull)
				}
			}
		}
	}
}

func TestPlanJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(mustCompute(t, plan.Input{P: 0.998, Steps: paperSteps}))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		"p", "steps", "target", "valid_fraction", "k_min", "k", "meets_target", "p_vote", "p_full",
		"p_full_k_min", "expected_votes_per_step", "shortcut_votes_per_step", "expected_samples_per_step",
		"expected_total_samples", "input_tokens", "output_tokens", "input_usd_per_mtok",
		"output_usd_per_mtok", "cost_per_call_usd", "expected_cost", "calls_per_step_with_n", "expected_cost_with_n",
	} {
		if _, ok := m[key]; !ok {
			t.Errorf("plan JSON lacks %q: %s", key, b)
		}
	}
	if len(m) != 22 {
		t.Errorf("plan JSON has %d fields, want 22: %s", len(m), b)
	}
}

// TestPlanWithN: the paper's run (20 disks, p 0.998, gpt-4.1-mini's
// prices, 600 tokens in and 300 out) priced both ways: with a wave's
// samples after the first in one call, 2 + (E[N] − k) calls a step pay
// the prompt instead of E[N]; every sample's output is paid either way.
func TestPlanWithN(t *testing.T) {
	t.Parallel()
	pl, err := plan.Compute(plan.Input{Steps: 1<<20 - 1, P: 0.998, Target: 0.95, ValidFraction: 1,
		InputTokens: 600, OutputTokens: 300, InputUSDPerMTok: 0.4, OutputUSDPerMTok: 1.6})
	if err != nil {
		t.Fatal(err)
	}
	en := pl.ExpectedSamplesPerStep
	if want := 2 + (en - float64(pl.K)); math.Abs(pl.CallsPerStepWithN-want) > 1e-12 {
		t.Errorf("calls a step with n %v, want %v", pl.CallsPerStepWithN, want)
	}
	s := float64(pl.Steps)
	want := s * (pl.CallsPerStepWithN*600*0.4 + en*300*1.6) / 1e6
	if math.Abs(pl.ExpectedCostWithN-want) > 1e-6 || pl.ExpectedCostWithN >= pl.ExpectedCost {
		t.Errorf("cost with n $%v, want $%v (below $%v without)", pl.ExpectedCostWithN, want, pl.ExpectedCost)
	}
}

func TestSteps(t *testing.T) {
	t.Parallel()
	for n := 1; n <= plan.MaxDisks; n++ {
		got, err := plan.Steps(n)
		if err != nil {
			t.Fatal(err)
		}
		in, err := hanoi.New(n)
		if err != nil {
			t.Fatal(err)
		}
		if got != in.TotalSteps() || got != 1<<n-1 {
			t.Errorf("Steps(%d) = %d, hanoi says %d", n, got, in.TotalSteps())
		}
	}
	if plan.MaxDisks != hanoi.MaxDisks {
		t.Errorf("MaxDisks %d, hanoi.MaxDisks %d", plan.MaxDisks, hanoi.MaxDisks)
	}
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	ok := plan.Input{P: 0.998, Steps: paperSteps}
	with := func(f func(*plan.Input)) plan.Input { in := ok; f(&in); return in }
	tests := []struct {
		name string
		in   plan.Input
		want string // in the message
	}{
		{"p one half", with(func(in *plan.Input) { in.P = 0.5 }), "does not converge when a sample is no more likely right than wrong"},
		{"p below half", with(func(in *plan.Input) { in.P = 0.3 }), "does not converge"},
		{"p zero", with(func(in *plan.Input) { in.P = 0 }), "does not converge"},
		{"p negative", with(func(in *plan.Input) { in.P = -1 }), "does not converge"},
		{"p one", with(func(in *plan.Input) { in.P = 1 }), "must be below 1"},
		{"p above one", with(func(in *plan.Input) { in.P = 1.5 }), "must be below 1"},
		{"p NaN", with(func(in *plan.Input) { in.P = math.NaN() }), "not a probability"},
		{"p +Inf", with(func(in *plan.Input) { in.P = math.Inf(1) }), "not a probability"},
		{"p -Inf", with(func(in *plan.Input) { in.P = math.Inf(-1) }), "not a probability"},
		{"p too close to half", with(func(in *plan.Input) { in.P = 0.5000000001 }), "so close to 0.5"},
		{"steps zero", with(func(in *plan.Input) { in.Steps = 0 }), "steps = 0 must be at least 1"},
		{"steps negative", with(func(in *plan.Input) { in.Steps = -5 }), "must be at least 1"},
		{"target negative", with(func(in *plan.Input) { in.Target = -0.1 }), "target"},
		{"target one", with(func(in *plan.Input) { in.Target = 1 }), "target = 1 must be in (0, 1)"},
		{"target above one", with(func(in *plan.Input) { in.Target = 1.5 }), "target"},
		{"target NaN", with(func(in *plan.Input) { in.Target = math.NaN() }), "target"},
		{"k negative", with(func(in *plan.Input) { in.K = -1 }), "margin k = -1"},
		{"v negative", with(func(in *plan.Input) { in.ValidFraction = -0.1 }), "valid fraction"},
		{"v above one", with(func(in *plan.Input) { in.ValidFraction = 1.01 }), "valid fraction"},
		{"v NaN", with(func(in *plan.Input) { in.ValidFraction = math.NaN() }), "valid fraction"},
		{"input tokens negative", with(func(in *plan.Input) { in.InputTokens = -1 }), "token counts"},
		{"output tokens negative", with(func(in *plan.Input) { in.OutputTokens = -1 }), "token counts"},
		{"input price negative", with(func(in *plan.Input) { in.InputUSDPerMTok = -0.4 }), "token prices"},
		{"output price negative", with(func(in *plan.Input) { in.OutputUSDPerMTok = -1.6 }), "token prices"},
		{"input price NaN", with(func(in *plan.Input) { in.InputUSDPerMTok = math.NaN() }), "token prices"},
		{"output price Inf", with(func(in *plan.Input) { in.OutputUSDPerMTok = math.Inf(1) }), "token prices"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := plan.Compute(tt.in)
			checkInvalid(t, err, tt.want)
		})
	}

	t.Run("KMin", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			p      float64
			s      int64
			target float64
			want   string
		}{
			{0.5, 10, 0.95, "does not converge"},
			{1, 10, 0.95, "below 1"},
			{0.9, 0, 0.95, "steps"},
			{0.9, 10, 0, "target"}, // no default here
			{0.9, 10, 1, "target"},
		} {
			_, err := plan.KMin(c.p, c.s, c.target)
			checkInvalid(t, err, c.want)
		}
	})
	t.Run("Steps", func(t *testing.T) {
		t.Parallel()
		for _, n := range []int{-1, 0, 31, 64} {
			_, err := plan.Steps(n)
			checkInvalid(t, err, "between 1 and 30")
		}
	})
	t.Run("NaN for out-of-range input", func(t *testing.T) {
		t.Parallel()
		for name, v := range map[string]float64{
			"PVote p":         plan.PVote(0.5, 3),
			"PVote k":         plan.PVote(0.9, -1),
			"PFull p":         plan.PFull(1, 3, 10),
			"PFull steps":     plan.PFull(0.9, 3, -1),
			"ExpectedVotes p": plan.ExpectedVotes(math.NaN(), 3),
			"ExpectedVotes k": plan.ExpectedVotes(0.9, -2),
		} {
			if !math.IsNaN(v) {
				t.Errorf("%s: %v, want NaN", name, v)
			}
		}
	})
}

func checkInvalid(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, plan.ErrInvalid) {
		t.Fatalf("error %v, want one wrapping ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want it to say %q", err, want)
	}
}

func mustCompute(t *testing.T, in plan.Input) plan.Plan {
	t.Helper()
	pl, err := plan.Compute(in)
	if err != nil {
		t.Fatalf("Compute(%+v): %v", in, err)
	}
	return pl
}

// exactPFull returns (1+r^k)^(−s) as a rational, p taken as its exact
// binary value.
func exactPFull(p float64, k int, s int64) *big.Rat {
	bp := new(big.Rat).SetFloat64(p)
	r := new(big.Rat).Sub(big.NewRat(1, 1), bp)
	r.Quo(r, bp)
	rk := big.NewRat(1, 1)
	for range k {
		rk.Mul(rk, r)
	}
	b := new(big.Rat).Add(big.NewRat(1, 1), rk)
	out := big.NewRat(1, 1)
	for range s {
		out.Mul(out, b)
	}
	return out.Inv(out)
}

// naiveKMin is the closed form with a plain ceil, for comparison only.
func naiveKMin(p float64, s int64, target float64) int {
	k := math.Ceil(math.Log(math.Expm1(-math.Log(target)/float64(s))) / math.Log((1-p)/p))
	return max(1, int(k))
}

// pFullReal is p_full at a real-valued k, to build targets whose exact
// k_min sits a little off an integer.
func pFullReal(p, k float64, s int64) float64 {
	return math.Exp(-float64(s) * math.Log1p(math.Pow((1-p)/p, k)))
}
