package step

import (
	"slices"

	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/schemas"
)

// The receipt's bounded aggregates: a million-step job's receipt is as
// large as a ten-step one's (the journal holds every step).

// bucketRange is the histogram bucket of value v: exact up to 16, then
// buckets about 1.5 times as wide as the one before (17-24, 25-36, ...).
func bucketRange(v int) (lo, hi int) {
	v = max(v, 0)
	if v <= 16 {
		return v, v
	}
	lo, hi = 17, 24
	for v > hi {
		lo, hi = hi+1, hi*3/2
	}
	return lo, hi
}

// addBucket counts one step of value v in hist (sorted by Lo).
func addBucket(hist []schemas.Bucket, v int) []schemas.Bucket {
	lo, hi := bucketRange(v)
	i, found := slices.BinarySearchFunc(hist, lo, func(b schemas.Bucket, lo int) int { return b.Lo - lo })
	if found {
		hist[i].Steps++
		return hist
	}
	return slices.Insert(hist, i, schemas.Bucket{Lo: lo, Hi: hi, Steps: 1})
}

// addKCount counts one step decided at margin k (ks sorted by K).
func addKCount(ks []schemas.KCount, k int) []schemas.KCount {
	i, found := slices.BinarySearchFunc(ks, k, func(c schemas.KCount, k int) int { return c.K - k })
	if found {
		ks[i].Steps++
		return ks
	}
	return slices.Insert(ks, i, schemas.KCount{K: k, Steps: 1})
}

// addRun adds step, decided at margin k, to the schedule: the last run
// grows, or a new one starts. Past MaxListedSteps runs the last listed
// one makes room for the new one and is counted in unlisted.
func addRun(runs []schemas.KRun, unlisted, step int64, k int) ([]schemas.KRun, int64) {
	if n := len(runs); n > 0 && runs[n-1].K == k && runs[n-1].ToStep == step-1 {
		runs[n-1].ToStep = step
		return runs, unlisted
	}
	run := schemas.KRun{FromStep: step, ToStep: step, K: k}
	if len(runs) < schemas.MaxListedSteps {
		return append(runs, run), unlisted
	}
	runs[len(runs)-1] = run
	return runs, unlisted + 1
}

// FillReceipt puts the receipt on a report. For an adaptive-k job the
// theory figures are the schedule's: E[N] at each step's k, at the job's
// p_estimate.
func (m *Machine) FillReceipt(rep *schemas.JobReport) {
	rec := m.receipt()
	rep.Receipt = rec
	p := m.spec.PEstimate
	if m.spec.ReliabilityTarget == 0 || !(p > 0.5 && p < 1) || rec.BoundSteps == 0 {
		return
	}
	var votes float64
	for _, c := range rec.KSteps {
		votes += float64(c.Steps) * plan.ExpectedVotes(p, c.K)
	}
	v := m.spec.ValidFraction
	if !(v > 0 && v <= 1) {
		v = 1
	}
	rep.ExpectedVotesPerStep = votes / float64(rec.BoundSteps)
	rep.ExpectedSamplesPerStep = rep.ExpectedVotesPerStep / v
}
