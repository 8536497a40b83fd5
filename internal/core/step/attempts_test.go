package step

import (
	"strings"
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

// TestUnserved: a voter's notice that it could not have a sample served
// says why the job waits (the model, the provider's answer) without
// counting as a sample or ending the stall; a forged one (not the
// sample's token) is dropped; the first answer counted clears it.
func TestUnserved(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spec(2, 0), 3, byIndex(rightAns))
	h.start()
	unserved := func(res *schemas.SampleResult) {
		res.Outcome, res.VoteKey, res.PromptTokens, res.CompletionTokens = schemas.OutcomeUnserved, "", 0, 0
		res.Model, res.Detail = "gpt-nope", "llm: the provider refuses the key or the model: http status 404: "+strings.Repeat("x", 900)
	}
	forged := *h.queue[0]
	forged.Token = "AAAAAAAAAAAAAAAAAAAAAA"
	h.do(nil, h.m.OnResults(h.now, []Incoming{{Data: h.resultWith(&forged, rightAns(0), unserved)}}))
	if h.m.Unserved != nil {
		t.Fatalf("a forged notice was taken: %+v", h.m.Unserved)
	}
	samples := h.m.Acct.Samples
	h.do(nil, h.m.OnResults(h.now, []Incoming{{Data: h.resultWith(h.queue[0], rightAns(0), unserved)}}))
	u := h.m.Unserved
	if u == nil || u.Model != "gpt-nope" || !strings.Contains(u.Error, "404") || len(u.Error) > schemas.MaxUnservedDetail+len("…") || u.Step != h.m.Step {
		t.Fatalf("Unserved = %+v, want the model and the 404, clipped", u)
	}
	if u.Task {
		t.Error("a provider's notice read as the task's")
	}
	if h.m.Acct.Samples != samples {
		t.Errorf("the notice counted as a sample: %d, want %d", h.m.Acct.Samples, samples)
	}
	// A voter that cannot run the request says so (cause task).
	h.do(nil, h.m.OnResults(h.now, []Incoming{{Data: h.resultWith(h.queue[0], rightAns(0), func(res *schemas.SampleResult) {
		unserved(res)
		res.Model, res.Cause, res.Detail = "", schemas.UnservedTask, "inputs: not in the inputs store: sha256:…"
	})}}))
	if u := h.m.Unserved; u == nil || !u.Task || !strings.Contains(u.Error, "not in the inputs store") {
		t.Fatalf("Unserved = %+v, want the task's cause and the voter's error", u)
	}
	h.deliver(1)
	if h.m.Unserved != nil {
		t.Errorf("Unserved = %+v after an answer was counted", h.m.Unserved)
	}
}
