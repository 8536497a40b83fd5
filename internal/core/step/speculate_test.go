package step

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// refWalk is walk with a reference answer: speculation can guess a step's
// winner before any vote is in.
type refWalk struct{ walk }

var _ task.Referencer = refWalk{}

func (refWalk) ReferenceVote(s task.State) (task.Vote, error) {
	n, err := strconv.Atoi(string(s))
	if err != nil {
		return task.Vote{}, fmt.Errorf("%w: %v", task.ErrNoReference, err)
	}
	return task.Vote{Key: right(n)}, nil
}

// noisy answers like a model that is right with chance about 1 − 1/every
// and, when wrong, jumps to another state (so a wrong decision changes
// the chain and speculation from the reference loses): a function of the
// state and the index only, as the simulated model's answers are of the
// request.
func noisy(every uint32) script {
	return func(req *schemas.SampleRequest) string {
		n, _ := strconv.Atoi(string(req.State))
		h := fnv.New32a()
		fmt.Fprintf(h, "%d/%d", n, req.Index)
		switch v := h.Sum32(); {
		case v%every == 0:
			return otherState(n)
		case v%every == 1:
			return fmt.Sprintf("C@%d", n+1) // same state, another move
		case v%(every*3) == 2:
			return "!parse"
		}
		return right(n)
	}
}

// decisionsOf lists what h's journal decided, step by step.
func decisionsOf(h *harness) []string {
	var out []string
	for _, e := range h.entries {
		if e.Type == schemas.EntryDecision {
			out = append(out, fmt.Sprintf("%d %s votes=%d lead=%d counted=%d valid=%d rf=%d",
				e.Step, e.VoteKey, e.Votes, e.Lead, e.Counted, e.Valid, e.RedFlagged))
		}
	}
	return out
}

// TestSpeculationSameDecisions: for the same answers, a job that samples
// ahead decides every step as a job that does not (the same winners,
// votes, samples counted and red flags, the same trace and errors),
// whatever the depth, with or without a reference to guess from, and
// whether answers come all at once or one at a time.
func TestSpeculationSameDecisions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inst  task.Instance
		every uint32
		k     int
	}{
		{"reference k2", refWalk{walk{60}}, 7, 2},
		{"reference k3", refWalk{walk{60}}, 5, 3},
		{"leader only", walk{60}, 7, 2},
		{"wrong decisions k1", refWalk{walk{200}}, 4, 1},
		{"wrong decisions leader only", walk{200}, 4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, one := range []bool{false, true} {
				base := runSpec(t, tc.inst, tc.k, 0, noisy(tc.every), one)
				for _, depth := range []int{1, 2, 4, 8} {
					h := runSpec(t, tc.inst, tc.k, depth, noisy(tc.every), one)
					got, want := decisionsOf(h), decisionsOf(base)
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Fatalf("depth %d (one at a time %v): decisions differ\n got %v\nwant %v", depth, one, got, want)
					}
					g, w := h.m.Acct.Figures, base.m.Acct.Figures
					if g.Steps != w.Steps || g.Errors != w.Errors || g.Samples != w.Samples || g.Votes != w.Votes || g.RedFlagged != w.RedFlagged {
						t.Errorf("depth %d: figures %+v, want those of %+v", depth, g, w)
					}
					if fmt.Sprintf("%x", h.m.Trace.Sum(nil)) != fmt.Sprintf("%x", base.m.Trace.Sum(nil)) {
						t.Errorf("depth %d: trace differs", depth)
					}
					if h.m.End == nil || base.m.End == nil || h.m.End.State != base.m.End.State {
						t.Errorf("depth %d: end %+v, want %+v", depth, h.m.End, base.m.End)
					}
					// Without a reference the guess is a leader, and at k = 1
					// the first vote decides: nothing can be guessed earlier.
					_, hasRef := tc.inst.(task.Referencer)
					if g.SpeculativeSamples == 0 && (hasRef || tc.k > 1) {
						t.Errorf("depth %d: nothing sampled ahead", depth)
					}
					// Every sample published is counted, late, wasted or
					// still out: none is lost track of.
					sent := int64(len(h.sent))
					if acc := g.Samples + g.LateSamples + g.SpeculativeWasted + g.DuplicateResults + g.SkippedSamples; acc > sent {
						t.Errorf("depth %d: %d samples accounted, only %d sent", depth, acc, sent)
					}
				}
				if tc.k == 1 && base.m.Acct.Errors == 0 && base.m.End.State == schemas.StateSolved {
					t.Errorf("no wrong decision: the case does not test a chain that leaves the reference")
				}
				if w := base.m.Acct.SpeculativeSamples; w != 0 {
					t.Errorf("depth 0 sampled %d ahead", w)
				}
			}
		})
	}
}

// runSpec runs a job of inst to its end at depth, answering from ans, all
// queued requests at once or one at a time, and checks on the way that
// nothing is ever sampled more than depth steps ahead.
func runSpec(t *testing.T, inst task.Instance, k, depth int, ans script, oneAtATime bool) *harness {
	t.Helper()
	sp := spec(k, 100)
	sp.SpeculationDepth = depth
	h := harnessFor(t, sp, inst, ans)
	h.start()
	for i := 0; len(h.queue) > 0 && !h.m.Halted(); i++ {
		if i > 200_000 {
			t.Fatal("run does not end")
		}
		n := -1
		if oneAtATime {
			n = 1
		}
		h.deliver(n)
		for _, r := range h.queue {
			if r.Step > h.m.Step+int64(depth) || r.Branch == 0 && r.Step != h.m.Step && !h.m.Halted() {
				t.Fatalf("step %d open, request for step %d (branch %d) at depth %d", h.m.Step, r.Step, r.Branch, depth)
			}
		}
	}
	if h.m.End == nil {
		t.Fatalf("job did not end; actions %v", h.acts[max(0, len(h.acts)-20):])
	}
	return h
}

// TestSpeculationLostGuess: a wrong first answer leads the step, the
// guess follows it, then the right answer wins: the step sampled from the
// wrong guess is thrown away and counted as wasted (in the report's
// wasted samples too), and the decisions are those of a job that did not
// speculate.
func TestSpeculationLostGuess(t *testing.T) {
	ans := func(req *schemas.SampleRequest) string {
		n, _ := strconv.Atoi(string(req.State))
		if n == 2 && req.Index == 0 {
			return otherState(n)
		}
		return right(n)
	}
	base := runSpec(t, refWalk{walk{8}}, 2, 0, ans, true)
	h := runSpec(t, refWalk{walk{8}}, 2, 3, ans, true)
	if fmt.Sprint(decisionsOf(h)) != fmt.Sprint(decisionsOf(base)) {
		t.Fatalf("decisions differ:\n got %v\nwant %v", decisionsOf(h), decisionsOf(base))
	}
	f := h.m.Acct.Figures
	if f.SpeculativeWasted == 0 || f.SpeculativeWasted > f.SpeculativeSamples {
		t.Errorf("speculative wasted %d of %d: want some lost", f.SpeculativeWasted, f.SpeculativeSamples)
	}
	// The lost guess's answers came in too: their tokens are paid for.
	if f.PromptTokens <= base.m.Acct.PromptTokens {
		t.Errorf("prompt tokens %d, want more than without speculation (%d)", f.PromptTokens, base.m.Acct.PromptTokens)
	}
	if h.m.End.State != schemas.StateSolved {
		t.Errorf("end %+v", h.m.End)
	}
}

// wrongRef is walk with a reference that is always wrong: every guess
// from it loses.
type wrongRef struct{ walk }

func (wrongRef) ReferenceVote(s task.State) (task.Vote, error) {
	n, _ := strconv.Atoi(string(s))
	return task.Vote{Key: otherState(n)}, nil
}

// TestSpeculationWasteBound: when every guess loses, the job stops
// sampling ahead once what it threw away passes its bound, and still
// decides as without speculation.
func TestSpeculationWasteBound(t *testing.T) {
	for _, maxWaste := range []float64{0.05, 0.3} {
		sp := spec(2, 100)
		sp.SpeculationDepth, sp.SpeculationMaxWaste = 4, maxWaste
		// Answers only after all are out: each step's guess is the
		// reference's until then.
		h := harnessFor(t, sp, wrongRef{walk{200}}, byIndex(rightAns))
		h.start()
		h.run()
		base := runSpec(t, wrongRef{walk{200}}, 2, 0, byIndex(rightAns), false)
		if fmt.Sprint(decisionsOf(h)) != fmt.Sprint(decisionsOf(base)) {
			t.Fatal("decisions differ from a job without speculation")
		}
		f := h.m.Acct.Figures
		bound := maxWaste*float64(f.Samples) + float64(sp.SpeculationDepth*sp.K) + float64(sp.SpeculationDepth*sp.K)
		if float64(f.SpeculativeWasted) > bound {
			t.Errorf("max waste %v: %d wasted of %d samples, bound %v", maxWaste, f.SpeculativeWasted, f.Samples, bound)
		}
		if f.SpeculativeWasted == 0 {
			t.Errorf("max waste %v: nothing wasted, want the wrong guesses' samples", maxWaste)
		}
	}
}

// TestSpeculationReplayedJournal: a new owner rebuilds the same chain
// and figures from a speculating job's journal.
func TestSpeculationReplayedJournal(t *testing.T) {
	h := runSpec(t, refWalk{walk{40}}, 2, 4, noisy(6), false)
	r := replayed(t, h)
	if r.Step != h.m.Step || string(r.State) != string(h.m.State) {
		t.Fatalf("replayed step %d state %s, want %d %s", r.Step, r.State, h.m.Step, h.m.State)
	}
	g, w := r.Acct.Figures, h.m.Acct.Figures
	if g.Steps != w.Steps || g.Samples != w.Samples || g.SpeculativeSamples != w.SpeculativeSamples || g.SpeculativeWasted != w.SpeculativeWasted {
		t.Errorf("replayed figures %+v, want %+v", g, w)
	}
}

// TestSpeculationPauseWastes: a pause at a step boundary throws the steps
// ahead away (a resumed run starts them again), counted as wasted.
func TestSpeculationPauseWastes(t *testing.T) {
	sp := spec(2, 100)
	sp.SpeculationDepth = 3
	h := harnessFor(t, sp, refWalk{walk{20}}, byIndex(rightAns))
	h.start()
	if n := len(h.queue); n != 2+3*2 {
		t.Fatalf("%d requests out, want the open step's 2 and 3 steps ahead's 2 each", n)
	}
	h.m.Control = schemas.ControlPause
	h.deliver(2) // the open step decides; the boundary pauses
	if !h.paused {
		t.Fatalf("not paused; actions %v", h.acts)
	}
	if got := h.m.Acct.SpeculativeWasted; got < 4 {
		t.Errorf("wasted %d at the pause, want the steps still ahead", got)
	}
	if len(h.m.Ahead.slots) != 0 {
		t.Errorf("%d steps still ahead after the pause", len(h.m.Ahead.slots))
	}
}

// TestSpeculationAccountsEverySample: every request published is
// accounted exactly once (counted, late, duplicate, skipped or lost with
// its guess), also when voters skip samples of steps ahead (asked again
// when the step is adopted) and guesses lose.
func TestSpeculationAccountsEverySample(t *testing.T) {
	skips := map[string]bool{}
	ans := func(req *schemas.SampleRequest) string {
		if req.Branch != 0 && req.Index == 0 && !skips[req.SampleID] {
			skips[req.SampleID] = true
			return "skipped"
		}
		return noisy(5)(req)
	}
	h := runSpec(t, refWalk{walk{80}}, 2, 3, ans, false)
	f := h.m.Acct.Figures
	got := f.Samples + f.LateSamples + f.DuplicateResults + f.SkippedSamples + f.CancelledSamples + f.SpeculativeWasted
	if got != int64(len(h.sent)) || f.SkippedSamples == 0 {
		t.Errorf("%d requests sent, %d accounted (samples %d late %d dup %d skipped %d lost %d)",
			len(h.sent), got, f.Samples, f.LateSamples, f.DuplicateResults, f.SkippedSamples, f.SpeculativeWasted)
	}
	base := runSpec(t, refWalk{walk{80}}, 2, 0, noisy(5), false)
	if fmt.Sprint(decisionsOf(h)) != fmt.Sprint(decisionsOf(base)) {
		t.Error("decisions differ from a job without speculation")
	}
}

// TestSpeculationUnsent: steps ahead whose requests were not published
// (admission held them back) are taken back, not counted as drawn, and
// the step is sampled when reached as without speculation.
func TestSpeculationUnsent(t *testing.T) {
	sp := spec(2, 100)
	sp.SpeculationDepth = 3
	h := harnessFor(t, sp, refWalk{walk{10}}, byIndex(rightAns))
	acts, err := h.m.TopUp(h.now)
	if err != nil {
		t.Fatal(err)
	}
	var open, ahead []*schemas.SampleRequest
	for _, a := range acts {
		if a.Kind == ActPublish && a.Req.Branch != 0 {
			ahead = append(ahead, a.Req)
		} else if a.Kind == ActPublish {
			open = append(open, a.Req)
		}
	}
	if len(ahead) != 6 {
		t.Fatalf("%d requests ahead, want 3 steps of 2", len(ahead))
	}
	h.m.Unsent(ahead)
	if n := h.m.Acct.SpeculativeSamples; n != 0 || len(h.m.Ahead.slots) != 0 || h.m.Acct.SpeculativeWasted != 0 {
		t.Fatalf("after unsent: speculative %d, %d steps ahead, wasted %d", n, len(h.m.Ahead.slots), h.m.Acct.SpeculativeWasted)
	}
	h.queue = append(h.queue, open...)
	h.sent = append(h.sent, open...)
	h.run()
	if h.m.End == nil || h.m.End.State != schemas.StateSolved || h.m.Acct.Resampled != 0 {
		t.Fatalf("end %+v resampled %d", h.m.End, h.m.Acct.Resampled)
	}
}

// TestSpeculationRecordsAhead: the answers held for the step after the
// open one go to Redis with the open step's, guarded by the guess they
// were sampled from, so one round trip decides both; a guess that loses
// records nothing of its step there (its answers are not counted), and
// the decisions are those of a job that does not speculate.
func TestSpeculationRecordsAhead(t *testing.T) {
	records := func(h *harness) (n int) {
		for _, a := range h.acts {
			if strings.HasPrefix(a, "record ") {
				n++
			}
		}
		return n
	}
	const steps = 40
	for _, tc := range []struct {
		name string
		ans  script
		// most is the most record round trips a step allowed, in tenths
		// (0: fewer than without speculation)
		most int
	}{
		{"every answer right: two steps a round trip", byIndex(rightAns), 6},
		{"wrong answers and lost guesses", noisy(4), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := runSpec(t, refWalk{walk{steps}}, 2, 0, tc.ans, false)
			h := runSpec(t, refWalk{walk{steps}}, 2, 4, tc.ans, false)
			if got, want := decisionsOf(h), decisionsOf(base); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("decisions differ\n got %v\nwant %v", got, want)
			}
			g, w := h.m.Acct.Figures, base.m.Acct.Figures
			if g.Samples != w.Samples || g.Votes != w.Votes || g.DuplicateResults != 0 {
				t.Errorf("samples %d votes %d duplicates %d, want %d, %d and none", g.Samples, g.Votes, g.DuplicateResults, w.Samples, w.Votes)
			}
			decided := int(h.m.Acct.Steps)
			if n := records(h); tc.most > 0 && n*10 > decided*tc.most {
				t.Errorf("%d record round trips for %d steps, want at most %d.%d a step", n, decided, tc.most/10, tc.most%10)
			} else if n >= records(base) {
				t.Errorf("%d record round trips, %d without speculation: want fewer", n, records(base))
			}
			t.Logf("%d record round trips for %d steps (%d without speculation)", records(h), decided, records(base))
		})
	}
	// Adaptive k: the step after's margin is chosen once the open step is
	// decided, so its answers wait for it (counted against the open
	// step's margin they could leave a lead no vote tests again: a stall).
	t.Run("adaptive k", func(t *testing.T) {
		run := func(depth int) *harness {
			sp := adaptiveSpec(6, 0.95, 0)
			sp.SpeculationDepth = depth
			h := harnessFor(t, sp, refWalk{walk{150}}, noisy(9))
			h.start()
			h.run()
			if h.m.End == nil || h.m.Acct.Steps != 150 {
				t.Fatalf("depth %d: %d of 150 steps decided, end %+v", depth, h.m.Acct.Steps, h.m.End)
			}
			return h
		}
		if got, want := decisionsOf(run(4)), decisionsOf(run(0)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("decisions differ\n got %v\nwant %v", got, want)
		}
	})
}
