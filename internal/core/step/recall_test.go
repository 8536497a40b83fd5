package step

import (
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestMachineCopiesOfEarlierStepsNotBilled: the answer to a copy of a
// request reaches the job steps after its own was decided (the copy's
// answers went in other messages than the original's, so the results
// stream kept them): an index its step counted is not billed again, for
// as long as the recall window; an index it did not count, or one past the
// window, is waste, paid for.
func TestMachineCopiesOfEarlierStepsNotBilled(t *testing.T) {
	h := newHarness(t, spec(1, 100), 10, byIndex(rightAns))
	h.start()
	step0 := *h.queue[0]
	h.deliver(1) // decides step 0
	h.deliver(1) // step 1
	h.deliver(1) // step 2
	if h.m.Step != 3 {
		t.Fatalf("at step %d, want 3", h.m.Step)
	}
	copyOf := func(req schemas.SampleRequest) {
		h.t.Helper()
		h.do(nil, h.m.OnResults(h.now, []Incoming{{Data: h.result(&req, right(int(req.Step)))}}))
	}
	tokens := h.m.Acct.PromptTokens
	copyOf(step0)
	if h.m.Acct.PromptTokens != tokens || h.m.Acct.LateSamples != 0 {
		t.Errorf("a copy of step 0's counted answer at step 3: tokens %d → %d, late %d; want not billed", tokens, h.m.Acct.PromptTokens, h.m.Acct.LateSamples)
	}

	// An index step 0 never counted: a call of the job's, wasted.
	other := step0
	other.Index = 1
	h.sign(&other)
	copyOf(other)
	if h.m.Acct.PromptTokens != tokens+100 || h.m.Acct.LateSamples != 1 {
		t.Errorf("an answer step 0 did not count: tokens %d → %d, late %d; want it billed as late", tokens, h.m.Acct.PromptTokens, h.m.Acct.LateSamples)
	}

	// Past the window, steps decided since push step 0 out.
	h.now = h.now.Add(DefaultRecallWindow + time.Second)
	h.deliver(1) // step 3
	tokens = h.m.Acct.PromptTokens
	copyOf(step0)
	if h.m.Acct.PromptTokens != tokens+100 || h.m.Acct.LateSamples != 2 {
		t.Errorf("a copy past the recall window: tokens %d → %d, late %d; want it billed as late", tokens, h.m.Acct.PromptTokens, h.m.Acct.LateSamples)
	}
}

func TestRecall(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	t.Run("counted and held indexes", func(t *testing.T) {
		r := newRecall(0)
		r.note(t0, 4, 9, 3, map[int]string{0: "", 1: "", 2: "x", 5: "", 70: ""})
		for _, tc := range []struct {
			step, epoch int64
			index       int
			want        bool
		}{
			{4, 9, 0, true}, {4, 9, 2, true}, {4, 9, 5, true},
			{4, 9, 3, false}, {4, 9, 4, false}, {4, 9, 63, false},
			{4, 9, 70, false}, // beyond what is kept index by index: billed, as before
			{4, 9, -1, false}, {4, 8, 0, false}, {3, 9, 0, false}, {5, 9, 0, false},
		} {
			if got := r.counted(tc.step, tc.epoch, tc.index); got != tc.want {
				t.Errorf("counted(%d, %d, %d) = %v, want %v", tc.step, tc.epoch, tc.index, got, tc.want)
			}
		}
	})
	t.Run("a window of steps", func(t *testing.T) {
		r := newRecall(time.Second)
		for s := range int64(1000) {
			r.note(t0.Add(time.Duration(s)*time.Millisecond), s, 1, 2, nil)
		}
		if r.n != 1000 || !r.counted(0, 1, 1) || !r.counted(999, 1, 0) || !r.counted(500, 1, 1) {
			t.Fatalf("%d steps held; want all 1000 decided within the window", r.n)
		}
		r.note(t0.Add(1500*time.Millisecond), 1000, 1, 2, nil)
		if r.counted(499, 1, 0) || !r.counted(500, 1, 0) || !r.counted(1000, 1, 1) {
			t.Errorf("after 1.5 s: step 499 held %v, 500 %v; want only the last second's", r.counted(499, 1, 0), r.counted(500, 1, 0))
		}
	})
	t.Run("bounded", func(t *testing.T) {
		r := newRecall(time.Hour)
		for s := range int64(maxRecalled + 10) {
			r.note(t0, s, 1, 1, nil)
		}
		if r.n != maxRecalled || len(r.ring) != maxRecalled || r.counted(9, 1, 0) || !r.counted(10, 1, 0) {
			t.Errorf("%d steps held in a ring of %d; want the last %d", r.n, len(r.ring), maxRecalled)
		}
	})
	t.Run("a step decided again starts afresh", func(t *testing.T) {
		r := newRecall(0)
		r.note(t0, 5, 1, 1, nil)
		r.note(t0, 6, 1, 1, nil)
		r.note(t0, 6, 2, 1, nil) // another epoch of step 6 (a takeover's replay)
		if r.counted(5, 1, 0) || r.counted(6, 1, 0) || !r.counted(6, 2, 0) {
			t.Error("what came before a step decided again is still held")
		}
	})
}
