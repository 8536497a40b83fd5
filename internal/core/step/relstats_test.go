package step

import (
	"fmt"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestReceiptAggregates: buckets, k counts and the run list stay bounded.
func TestReceiptAggregates(t *testing.T) {
	var hist []schemas.Bucket
	for v := range 200_000 {
		hist = addBucket(hist, v)
	}
	if len(hist) > schemas.MaxHistogramBuckets {
		t.Errorf("%d buckets for values up to 200000, want at most %d", len(hist), schemas.MaxHistogramBuckets)
	}
	for _, c := range []struct{ v, lo, hi int }{{0, 0, 0}, {16, 16, 16}, {17, 17, 24}, {24, 17, 24}, {25, 25, 36}, {37, 37, 54}} {
		if lo, hi := bucketRange(c.v); lo != c.lo || hi != c.hi {
			t.Errorf("bucketRange(%d) = [%d, %d], want [%d, %d]", c.v, lo, hi, c.lo, c.hi)
		}
	}
	var runs []schemas.KRun
	var unlisted int64
	for s := range int64(1000) {
		runs, unlisted = addRun(runs, unlisted, s, 3+int(s%2)) // a run per step
	}
	if len(runs) != schemas.MaxListedSteps || unlisted != 1000-schemas.MaxListedSteps || runs[len(runs)-1].FromStep != 999 {
		t.Errorf("%d runs listed, %d unlisted, last %+v; want %d, %d, the last step's", len(runs), unlisted, runs[len(runs)-1],
			schemas.MaxListedSteps, 1000-schemas.MaxListedSteps)
	}
	ks := addKCount(addKCount(addKCount(nil, 5), 3), 5)
	if fmt.Sprint(ks) != "[{3 1} {5 2}]" {
		t.Errorf("k counts %v", ks)
	}
}
