package coordinator

import (
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestNextWorkNeverNegative: tokens taken back after they were journaled
// (a duplicate of an answer the last decision counted) stay pending: no
// entry carries a negative figure, and the entries add up to the live
// figures once later work sets the difference off.
func TestNextWorkNeverNegative(t *testing.T) {
	r := &jobRun{}
	var journaled schemas.StepWork
	entry := func() schemas.StepWork {
		w := r.nextWork()
		r.lastWork = mapWork(r.lastWork, w, plus)
		journaled = mapWork(journaled, w, plus)
		return w
	}
	r.rep.PromptTokens, r.rep.StrongerPromptTokens = 360, 240 // a stronger-rung decision
	if w := entry(); w.PromptTokens != 360 || w.StrongerPromptTokens != 240 {
		t.Fatalf("first entry %+v", w)
	}
	r.rep.PromptTokens, r.rep.StrongerPromptTokens = 240, 120 // a duplicate taken back
	r.rep.PromptTokens += 240                                 // the next step, the job's own model
	w := entry()
	if w.PromptTokens != 120 || w.StrongerPromptTokens != 0 {
		t.Errorf("second entry %+v: want 120 prompt tokens and the stronger model's -120 pending", w)
	}
	r.rep.PromptTokens, r.rep.StrongerPromptTokens = r.rep.PromptTokens+360, r.rep.StrongerPromptTokens+360
	w = entry()
	if w.StrongerPromptTokens != 240 {
		t.Errorf("third entry %+v: want 360 stronger tokens less the 120 pending", w)
	}
	if journaled.PromptTokens != r.rep.PromptTokens || journaled.StrongerPromptTokens != r.rep.StrongerPromptTokens {
		t.Errorf("entries add up to %+v, live figures %d/%d", journaled, r.rep.PromptTokens, r.rep.StrongerPromptTokens)
	}
}
