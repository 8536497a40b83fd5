package batch

import (
	"slices"
	"strings"
	"time"
)

// The runner's choice of batches to feed, without I/O: which waiting
// batches to take and which fed ones to hand back, so that one tenant's
// batches cannot hold every slot while another tenant's batch waits.

// batchRef is one open batch as the runner's choice sees it.
type batchRef struct {
	key     string // record key, <tenant>.<batch>
	tenant  string
	created time.Time
}

// slotView is what the choice is made on.
type slotView struct {
	max     int // the runner's slots (MaxBatches)
	tenants int // tenants with open batches, fed here or not
	// fed are the batches this runner feeds; leaving marks those it has
	// handed back already, still stopping (their slots are not free yet).
	fed     []batchRef
	leaving map[string]bool
	// waiting are the open batches no runner feeds; patient marks those
	// already waiting at the runner's previous look (another runner with
	// room had its chance to take them).
	waiting []batchRef
	patient map[string]bool
}

// slotPlan is the choice: take these batches, hand back those.
type slotPlan struct {
	take     []batchRef
	handBack []batchRef
}

// share is a tenant's fair share of the slots: ceil(max / tenants).
func (v slotView) share() int {
	return (v.max + max(v.tenants, 1) - 1) / max(v.tenants, 1)
}

// choose decides, weighted-fair across tenants: a waiting batch of the
// tenant with the fewest batches fed here goes first, then the oldest.
// Free slots are filled in that order. When no slot is free and a patient
// waiting batch's tenant has fewer than its share here while another
// tenant has more, the newest batch of the tenant most over its share is
// handed back (once it stops, the waiting batch takes its slot, here or
// on a runner with room). Slots already being handed back are counted as
// given to the batches that would come first.
func choose(v slotView) slotPlan {
	count := map[string]int{}
	for _, b := range v.fed {
		if !v.leaving[b.key] {
			count[b.tenant]++
		}
	}
	waiting := slices.Clone(v.waiting)
	// next removes and returns the waiting batch that comes first, among
	// those ok accepts.
	next := func(ok func(batchRef) bool) (batchRef, bool) {
		best := -1
		for i, b := range waiting {
			if ok != nil && !ok(b) {
				continue
			}
			if best < 0 || before(b, waiting[best], count) {
				best = i
			}
		}
		if best < 0 {
			return batchRef{}, false
		}
		b := waiting[best]
		waiting = slices.Delete(waiting, best, best+1)
		return b, true
	}
	var p slotPlan
	for used := len(v.fed); used < v.max; used++ {
		b, ok := next(nil)
		if !ok {
			return p
		}
		count[b.tenant]++
		p.take = append(p.take, b)
	}
	for range len(v.leaving) { // the slots already being freed
		b, ok := next(nil)
		if !ok {
			return p
		}
		count[b.tenant]++
	}
	share := v.share()
	fed := slices.Clone(v.fed)
	for {
		b, ok := next(func(b batchRef) bool { return v.patient[b.key] && count[b.tenant] < share })
		if !ok {
			return p
		}
		victim := ""
		for t, n := range count {
			if n > share && (victim == "" || n > count[victim] || n == count[victim] && t < victim) {
				victim = t
			}
		}
		if victim == "" {
			return p
		}
		newest := -1
		for i, f := range fed {
			if f.tenant == victim && !v.leaving[f.key] && (newest < 0 || !olderThan(f, fed[newest])) {
				newest = i
			}
		}
		if newest < 0 { // its count is batches this plan takes
			return p
		}
		p.handBack = append(p.handBack, fed[newest])
		fed = slices.Delete(fed, newest, newest+1)
		count[victim]--
		count[b.tenant]++
	}
}

// before orders waiting batches: fewer of its tenant fed here first,
// then the oldest.
func before(a, b batchRef, count map[string]int) bool {
	if ca, cb := count[a.tenant], count[b.tenant]; ca != cb {
		return ca < cb
	}
	return olderThan(a, b)
}

func olderThan(a, b batchRef) bool {
	if c := a.created.Compare(b.created); c != 0 {
		return c < 0
	}
	return strings.Compare(a.key, b.key) < 0
}
