package step

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// faulty is walk whose own logic fails (task.ErrEval) at one state, the
// way a spec's template or expression fails for one state: the prompt
// from it, the next state from any vote at it, the done check of it, or
// the reference answer (the verifier) from it.
type faulty struct {
	walk
	what string // "prompt", "next", "done" or "reference"
	at   int    // the state it fails at
}

var (
	_ task.DoneChecker = faulty{}
	_ task.Verifier    = faulty{}
)

// fails is the failure of what at s, worded as a spec's (the expression
// and why), or nil.
func (f faulty) fails(s task.State, what string) error {
	if f.what != what || string(s) != strconv.Itoa(f.at) {
		return nil
	}
	return fmt.Errorf("%w: %s (12 / (%d - state.i)): division by zero", task.ErrEval, what, f.at)
}

func (f faulty) Prompt(s task.State) ([]task.Message, error) {
	if err := f.fails(s, "prompt"); err != nil {
		return nil, err
	}
	return f.walk.Prompt(s)
}

// Next reads the vote first, as a spec does: a malformed key is the
// vote's fault, a failing expression the task's.
func (f faulty) Next(s task.State, v task.Vote) (task.State, error) {
	next, err := f.walk.Next(s, v)
	if err != nil {
		return nil, err
	}
	if err := f.fails(s, "next"); err != nil {
		return nil, err
	}
	return next, nil
}

func (f faulty) DoneErr(s task.State) (bool, error) {
	if err := f.fails(s, "done"); err != nil {
		return false, err
	}
	return f.walk.Done(s), nil
}

func (f faulty) Done(s task.State) bool {
	ok, err := f.DoneErr(s)
	return err == nil && ok
}

func (f faulty) Verify(s task.State, v task.Vote) error {
	if err := f.fails(s, "reference"); err != nil {
		return err
	}
	return f.walk.Verify(s, v)
}

// begin starts the job as the shell does (jobRun.run): the end check of
// the state it starts from, then the first wave.
func (h *harness) begin() {
	h.t.Helper()
	if acts := h.m.EndIfOver(); acts != nil {
		h.do(nil, acts)
		return
	}
	h.start()
}

// decidedSteps lists the steps of the decision entries, in journal order.
func decidedSteps(es []schemas.JournalEntry) []int64 {
	var out []int64
	for _, e := range es {
		if e.Type == schemas.EntryDecision || e.Type == schemas.EntryArbiter {
			out = append(out, e.Step)
		}
	}
	return out
}

// countOf counts a in acts.
func countOf(acts []string, a string) int {
	n := 0
	for _, x := range acts {
		if x == a {
			n++
		}
	}
	return n
}

// upTo is 0, 1, …, n-1.
func upTo(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

// checkFailedAt checks that h's job ended failed at step at, with a reason
// naming the step and the failing expression, after deciding exactly the
// steps before it, each once.
func checkFailedAt(t *testing.T, h *harness, at int, what string) {
	t.Helper()
	e := h.m.End
	if e == nil || e.State != schemas.StateFailed {
		t.Fatalf("end %+v, want failed; actions %v", e, h.acts)
	}
	for _, want := range []string{fmt.Sprintf("the task failed at step %d: ", at), what + " (", "division by zero"} {
		if !strings.Contains(e.Reason, want) {
			t.Errorf("reason %q does not say %q", e.Reason, want)
		}
	}
	if got := decidedSteps(h.entries); !slices.Equal(got, upTo(at)) {
		t.Errorf("decided steps %v, want each of the %d steps before the failure once", got, at)
	}
	if h.m.Step != int64(at) || h.m.Acct.Steps != int64(at) {
		t.Errorf("machine at step %d with %d steps counted, want %d", h.m.Step, h.m.Acct.Steps, at)
	}
	if n := countOf(h.acts, "end"); n != 1 {
		t.Errorf("%d end actions, want 1: %v", n, h.acts)
	}
}

// TestMachineTaskFailsAtStep: a task whose own logic fails for the state
// of step N (task.ErrEval from Prompt, Next, DoneErr or the verifier's
// reference, as a spec's template or expression does) ends the job failed
// at step N with a reason naming the step and the expression. The steps
// before are decided once each, nothing after; no sample is published
// for a step whose prompt or done check cannot be evaluated; late answers
// and timers after the end change nothing; and an owner resuming from the
// journal fails the same way without deciding anything again.
func TestMachineTaskFailsAtStep(t *testing.T) {
	answers := map[int]script{
		1: byIndex(rightAns),
		2: byIndex(redFlag, rightAns),            // a red flag replaced first
		3: byIndex(rightAns, wrongAns, rightAns), // a lead lost and won back
	}
	for _, what := range []string{"prompt", "next", "done", "reference"} {
		for _, at := range []int{0, 2} {
			for k := 1; k <= 3; k++ {
				for _, batch := range []int{1, -1} {
					name := fmt.Sprintf("%s/at=%d/k=%d/batch=%d", what, at, k, batch)
					t.Run(name, func(t *testing.T) {
						inst := faulty{walk: walk{steps: 5}, what: what, at: at}
						h := harnessFor(t, spec(k, 20), inst, answers[k])
						h.begin()
						for i := 0; len(h.queue) > 0 && !h.m.Halted(); i++ {
							if i > 1000 {
								t.Fatal("the job does not end")
							}
							h.deliver(batch)
						}
						checkFailedAt(t, h, at, what)

						// Samples: none past the failing step; none at it
						// when its prompt or done check fails (they could
						// never be answered, or are not needed).
						atStep := 0
						for _, r := range h.sent {
							if r.Step > int64(at) {
								t.Errorf("request %s published after the failing step %d", r.SampleID, at)
							}
							if r.Step == int64(at) {
								atStep++
							}
						}
						if wantNone := what == "prompt" || what == "done"; wantNone != (atStep == 0) {
							t.Errorf("%d requests for the failing step %d", atStep, at)
						}

						// Nothing decides after the end: late answers
						// (still queued) and overdue timers.
						end, n := *h.m.End, len(h.entries)
						h.deliver(-1)
						if acts := h.m.OnTick(h.now.Add(time.Hour)); len(acts) != 0 {
							t.Errorf("tick after the end: %s", describe(acts))
						}
						if len(h.entries) != n || h.m.End.State != end.State || h.m.End.Reason != end.Reason {
							t.Errorf("after the end: %d entries (was %d), end %+v (was %+v)", len(h.entries), n, *h.m.End, end)
						}

						// A new owner replays the journal to the failing
						// step and fails there again, deciding nothing.
						r := replayed(t, h)
						if r.Step != int64(at) || string(r.State) != strconv.Itoa(at) {
							t.Fatalf("replayed to step %d state %s, want %d", r.Step, r.State, at)
						}
						h2 := &harness{t: t, m: r, now: h.now, answer: h.answer}
						h2.do(nil, []Action{r.Open()})
						h2.begin()
						h2.run()
						if r.End == nil || r.End.State != schemas.StateFailed || r.End.Reason != end.Reason {
							t.Errorf("resumed: end %+v, want failed as before: %q", r.End, end.Reason)
						}
						if len(h2.entries) != 0 {
							t.Errorf("resumed: journaled %s", journalKinds(h2.entries))
						}
					})
				}
			}
		}
	}
}

// TestMachineTaskFailsAfterEscalation: a step that climbs its ladder
// fails like one decided by votes when the task cannot evaluate the
// answer the top rung settles on: the panel's choice whose reference
// answer fails, or a person's answer (the step's samples all red flags)
// whose next state or reference fails. The job ends failed at that step
// rather than pausing for a person again: the expression fails for the
// step's state, whoever answers.
func TestMachineTaskFailsAfterEscalation(t *testing.T) {
	split := func(req *schemas.SampleRequest) string { // A, B, A, B: never a lead of 2
		if req.Index%2 == 0 {
			return right(2)
		}
		return wrongAns(2)
	}
	cases := []struct {
		name, what string
		at2        script // the answers at step 2
		person     bool   // a person answers step 2 (else the panel does)
	}{
		{"panel/reference", "reference", split, false},
		{"person/next", "next", constScript("!parse"), true},
		{"person/reference", "reference", constScript("!parse"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := spec(2, 4)
			s.Escalation = &schemas.EscalationPolicy{Panel: true}
			inst := faulty{walk: walk{steps: 5}, what: tc.what, at: 2}
			h := harnessFor(t, s, inst, func(req *schemas.SampleRequest) string {
				if req.Step == 2 {
					return tc.at2(req)
				}
				n, _ := strconv.Atoi(string(req.State))
				return right(n)
			})
			h.arbiter = func(a *schemas.ArbitrationRequest) *schemas.ArbiterDecision {
				return &schemas.ArbiterDecision{Header: schemas.NewHeader(schemas.KindArbiterDecision), Tenant: "t", JobID: "j1",
					Step: a.Step, RequestID: "r", Outcome: schemas.ArbiterDecided, VoteKey: right(2), Confidence: 0.9}
			}
			h.begin()
			h.run()
			if tc.person {
				if h.human == "" || h.m.Step != 2 {
					t.Fatalf("needs-human %q at step %d, want a person asked at step 2", h.human, h.m.Step)
				}
				acts, ok := h.m.Person(h.now, schemas.PersonDecision{Step: 2, VoteKey: right(2), By: "alice"})
				h.human = ""
				h.do(nil, acts)
				if ok {
					t.Error("person: decided, want the job failed")
				}
			} else if len(h.arbs) != 1 {
				t.Fatalf("%d arbitrations, want 1", len(h.arbs))
			}
			if h.human != "" {
				t.Errorf("needs-human %q, want the job failed", h.human)
			}
			checkFailedAt(t, h, 2, tc.what)
		})
	}
}

// constScript answers every request with a.
func constScript(a string) script { return func(*schemas.SampleRequest) string { return a } }
