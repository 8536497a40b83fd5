package plan

import "math"

// The statistics of adaptive k and of the correlation test, pure functions
// (docs/statistics.md states each rule and its assumptions).

// Wilson is the Wilson score interval of right successes out of n trials
// (real numbers: a prior's pseudo-counts are fractional) at normal
// quantile z; the estimate right/n lies inside it. n <= 0 gives [0, 1]
// around 0.5.
func Wilson(right, n, z float64) (est, lo, hi float64) {
	if !(n > 0) {
		return 0.5, 0, 1
	}
	est = min(max(right/n, 0), 1)
	z2 := z * z
	den := 1 + z2/n
	center := (est + z2/(2*n)) / den
	half := z / den * math.Sqrt(est*(1-est)/n+z2/(4*n*n))
	lo, hi = max(center-half, 0), min(center+half, 1)
	return est, min(lo, est), max(hi, est)
}

// LogPVote is ln p_vote(p, k) = −ln(1 + r^k), for p in (0, 1): the
// chance the right answer wins a two-candidate race with margin k
// (gambler's ruin), below 0.5 too.
func LogPVote(p float64, k int) float64 {
	x := float64(k) * logR(p)
	if x > 0 { // r^k > 1: ln(1 + r^k) = x + ln(1 + r^−k), without overflow
		return -(x + math.Log1p(math.Exp(-x)))
	}
	return -math.Log1p(math.Exp(x))
}

// ChooseK is the adaptive margin of the next step: the smallest k in
// [lo, hi] with
//
//	logPast + left·ln p_vote(p, k) >= ln t
//
// where logPast is Σ ln p_vote(p, k_i) over the steps already decided (the
// risk spent, valued at the same p) and left counts the steps left, this
// one included. When no k in range reaches it (the risk already spent
// leaves nothing, or hi is too small), the margin is the smallest that
// would reach t over the steps left alone, within [lo, hi], and reached
// is false. p must be in (0.5, 1), left >= 1, t in (0, 1), 1 <= lo <= hi.
func ChooseK(p, logPast float64, left int64, t float64, lo, hi int) (k int, reached bool) {
	meets := func(k int, need float64) bool { return float64(left)*LogPVote(p, k) >= need }
	need := math.Log(t) - logPast
	reached = need < 0
	if !reached {
		need = math.Log(t) // the past already spends t: hold the rest to t
	}
	// r^k <= expm1(−need/left): a first guess, then the inequality itself.
	x := math.Expm1(-need / float64(left))
	k = lo
	if g := math.Log(x) / logR(p); g > float64(lo) && !math.IsInf(g, 0) && !math.IsNaN(g) {
		k = int(min(math.Ceil(g), float64(hi)))
	}
	for k > lo && meets(k-1, need) {
		k--
	}
	for k < hi && !meets(k, need) {
		k++
	}
	return k, reached && meets(k, need)
}

// RaceQuantile is the correlation test's threshold: the smallest n such
// that a two-candidate race with margin k (each sample valid with chance
// v, a valid vote right with chance p, the step decided when either
// candidate leads by k) is still undecided after n samples with chance at
// most alpha. limit bounds the search (the sample cap): limit when the
// chance is still above alpha there. It is exact (a walk over the lead,
// the formulas' worst case: every wrong vote for the same candidate).
func RaceQuantile(k int, p, v, alpha float64, limit int) int {
	if k < 1 || limit < 1 {
		return max(limit, 0)
	}
	// cur[i] is the chance the lead is i−(k−1) and the step undecided.
	w := 2*k - 1
	cur, next := make([]float64, w), make([]float64, w)
	cur[k-1] = 1
	up, down, stay := v*p, v*(1-p), 1-v
	for n := 1; n <= limit; n++ {
		alive := 0.0
		for i := range next {
			x := stay * cur[i]
			if i > 0 {
				x += up * cur[i-1]
			}
			if i < w-1 {
				x += down * cur[i+1]
			}
			next[i] = x
			alive += x
		}
		cur, next = next, cur
		if alive <= alpha {
			return n
		}
	}
	return limit
}

// QuantP rounds p down onto a grid of ln r in steps of 1/64 (a smaller p:
// a longer race, a larger threshold, fewer false alarms), so the
// threshold is recomputed only when p moves by a grid step.
func QuantP(p float64) float64 {
	lr := math.Ceil(logR(p)*64) / 64
	return 1 / (1 + math.Exp(lr))
}

// QuantV rounds a valid fraction down onto a grid of 1/64.
func QuantV(v float64) float64 { return max(math.Floor(v*64)/64, 1.0/64) }
