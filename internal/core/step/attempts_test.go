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

// TestStalled: the open step is stalled from the first re-publish of an
// overdue sample until an answer of it is counted; a forged answer does
// not end it.
func TestStalled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spec(2, 0), 3, byIndex(rightAns))
	h.start()
	if !h.m.Stalled.IsZero() {
		t.Fatalf("stalled at the start: %v", h.m.Stalled)
	}
	late := h.now.Add(2 * time.Minute)
	h.do(nil, h.m.OnTick(late))
	if !h.m.Stalled.Equal(late) {
		t.Fatalf("Stalled = %v after the timeout, want %v", h.m.Stalled, late)
	}
	forged := *h.queue[0]
	forged.Token = "AAAAAAAAAAAAAAAAAAAAAA" // well formed, not its sample's
	h.do(nil, h.m.OnResults(h.now, []Incoming{{Data: h.result(&forged, rightAns(0))}}))
	if h.m.Stalled.IsZero() {
		t.Error("a forged answer ended the stall")
	}
	h.deliver(1)
	if !h.m.Stalled.IsZero() {
		t.Errorf("Stalled = %v after an answer was counted", h.m.Stalled)
	}
}
