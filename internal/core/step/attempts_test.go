package step

import (
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestNewerAttemptKeepsPlace: a late answer of an older attempt of an
// index does not free the index's place in flight while a newer attempt
// is out; the newer attempt's answer does, and so does any answer once the
// index is no longer waited for.
func TestNewerAttemptKeepsPlace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spec(2, 0), 3, byIndex(rightAns))
	h.start()
	first := h.queue[0]
	h.do(nil, h.m.OnTick(h.now.Add(2*time.Minute))) // every index timed out: attempt 1 out
	var retry *schemas.SampleRequest
	for _, r := range h.queue {
		if r.Index == first.Index && r.Attempt == 1 {
			retry = r
		}
	}
	if retry == nil {
		t.Fatalf("no attempt 1 of index %d: %v", first.Index, h.published(0))
	}
	old := schemas.SampleResult{Step: first.Step, Epoch: first.Epoch, Index: first.Index, Attempt: first.Attempt}
	if !h.m.NewerAttemptOut(old) {
		t.Error("the late answer of attempt 0 would free the place attempt 1 holds")
	}
	cur := old
	cur.Attempt = retry.Attempt
	if h.m.NewerAttemptOut(cur) {
		t.Error("attempt 1's answer would keep its place")
	}
	other := old
	other.Step++
	if h.m.NewerAttemptOut(other) {
		t.Error("an answer of another step would keep a place")
	}
}
