package step

import (
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
)

// sequential is the reference rule applied to one step's answers in index
// order: first to lead every other candidate by k valid votes, red flags
// ("!…") for nobody. It returns the winner and the answers it used ("" and
// len(answers) without a winner).
func sequential(answers []string, k int) (string, int) {
	votes := map[string]int{}
	for i, a := range answers {
		if strings.HasPrefix(a, "!") {
			continue
		}
		votes[a]++
		top, second, lead := 0, 0, ""
		for c, n := range votes {
			switch {
			case n > top || n == top && c < lead:
				if n > top {
					second = top
				}
				top, lead = n, c
			case n > second:
				second = n
			}
		}
		if top-second >= k {
			return lead, i + 1
		}
	}
	return "", len(answers)
}

// TestMachineVotingRule drives one step with fixed answers by index,
// delivered one at a time and in batches, and checks the decision against
// the sequential rule and the samples drawn against what the rule needs:
// first-to-ahead-by-k (not first-to-k, no early stop below margin k), red
// flags replaced, waves that never pay for a sample after the decision.
func TestMachineVotingRule(t *testing.T) {
	cases := []struct {
		name    string
		k       int
		answers string // by index: A right, B and C wrong, ! a red flag
	}{
		{"unanimous", 3, "AAA"},
		{"first to k is not ahead by k", 2, "ABAA"},
		{"lead lost and won back", 3, "ABABAAA"},
		{"red flags replaced", 2, "!A!A"},
		{"a wrong candidate wins", 2, "BB"},
		{"three candidates", 2, "ABCAA"},
		{"k=1", 1, "B"},
	}
	for _, tc := range cases {
		for _, batch := range []int{1, -1} {
			t.Run(tc.name+"/batch"+strconv.Itoa(batch), func(t *testing.T) {
				keys := map[byte]func(int) string{'A': rightAns, 'B': wrongAns, 'C': otherState, '!': redFlag}
				var ans []string
				for i := range len(tc.answers) {
					ans = append(ans, keys[tc.answers[i]](0))
				}
				h := newHarness(t, spec(tc.k, 100), 1, func(req *schemas.SampleRequest) string { return ans[req.Index] })
				h.start()
				if got := len(h.sent); got != tc.k {
					t.Fatalf("first wave %d samples, want k=%d", got, tc.k)
				}
				for len(h.queue) > 0 && !h.m.Halted() {
					h.deliver(batch)
				}
				want, used := sequential(ans, tc.k)
				if len(h.entries) != 1 || h.entries[0].VoteKey != want || h.entries[0].Counted != used {
					t.Fatalf("entries %+v; want %s decided after %d samples", h.entries, want, used)
				}
				if len(h.sent) != used {
					t.Errorf("drew %d samples, the rule needs %d: %s", len(h.sent), used, h.published(0))
				}
				if e := h.entries[0]; e.Lead < tc.k || e.Votes < tc.k {
					t.Errorf("decided with lead %d, votes %d below k=%d", e.Lead, e.Votes, tc.k)
				}
			})
		}
	}
}

// TestMachineTemperatures: a step's first sample runs at the job's first
// temperature (0), every other at the rest temperature (0.1): not 0 on
// every vote (MAKER-FACTS §5), and a re-sample keeps its index's
// temperature and seed.
func TestMachineTemperatures(t *testing.T) {
	h := newHarness(t, spec(3, 100), 2, byIndex(rightAns))
	h.start()
	for _, r := range h.sent {
		want := 0.1
		if r.Index == 0 {
			want = 0
		}
		if r.Temperature != want || r.Seed != SampleSeed(7, r.Step, r.Index) {
			t.Errorf("index %d at temperature %v seed %d, want %v seed %d", r.Index, r.Temperature, r.Seed, want, SampleSeed(7, r.Step, r.Index))
		}
	}
	h.queue = nil
	acts := h.m.OnTick(h.now.Add(time.Minute))
	if len(acts) != 3 {
		t.Fatalf("tick after the timeout: %s, want 3 re-publishes", describe(acts))
	}
	for _, a := range acts {
		if a.Req.Attempt != 1 || a.Req.Seed != SampleSeed(7, 0, a.Req.Index) || (a.Req.Index == 0) != (a.Req.Temperature == 0) {
			t.Errorf("re-sample %+v changed its question", a.Req)
		}
	}
}

// TestMachineNextStateFromWinner: the next step starts from the state in
// the winning answer, never from the last sample's state or one computed
// by code (MAKER-FACTS §5: voting on the move but taking the state from the
// last sample).
func TestMachineNextStateFromWinner(t *testing.T) {
	// Index 0..2 say A@5 (right move, a state of their own), index 3 says
	// B@1: k=3 decides A@5 at index 2; the next step must start from 5.
	h := newHarness(t, spec(3, 100), 10, func(req *schemas.SampleRequest) string {
		if req.Step == 0 {
			return []string{"A@5", "A@5", "A@5", "B@1"}[req.Index]
		}
		n, _ := strconv.Atoi(string(req.State))
		return right(n)
	})
	h.start()
	h.deliver(-1)
	var next []string
	for _, r := range h.sent {
		if r.Step == 1 {
			next = append(next, string(r.State))
		}
	}
	if len(next) == 0 || slices.ContainsFunc(next, func(s string) bool { return s != "5" }) {
		t.Fatalf("step 1 sampled from states %v, want the winner's own 5", next)
	}
}

// TestMachineCap: a step that spends its cap without a decision is never
// sampled past it and, without an escalation policy, ends the job
// no_consensus with its tally (no silent plurality pick).
func TestMachineCap(t *testing.T) {
	h := newHarness(t, spec(3, 6), 5, byIndex(rightAns, wrongAns, otherState, rightAns, wrongAns, otherState, rightAns))
	h.start()
	h.run()
	if len(h.sent) != 6 {
		t.Errorf("drew %d samples, cap 6", len(h.sent))
	}
	e := h.m.End
	if e == nil || e.State != schemas.StateNoConsensus || e.NoConsensus == nil || e.NoConsensus.Samples != 6 || len(e.NoConsensus.Tally) != 3 {
		t.Fatalf("end %+v, want no_consensus after 6 samples with 3 candidates", e)
	}
	if f := h.m.Acct.Figures; f.Samples != 6 || f.Votes != 6 || f.Steps != 0 {
		t.Errorf("figures %+v: the undecided step's samples not counted", f)
	}
}

// TestMachineWholeRun: a 4-step job whose model is right except at index 1
// of every step, with k=2, solves with the right trace and figures that add
// up; its journal replayed into a new machine gives the same figures.
func TestMachineWholeRun(t *testing.T) {
	h := newHarness(t, spec(2, 100), 4, byIndex(rightAns, wrongAns, rightAns, rightAns))
	h.start()
	h.run()
	if e := h.m.End; e == nil || e.State != schemas.StateSolved {
		t.Fatalf("end %+v, want solved; actions %v", e, h.acts)
	}
	f := h.m.Acct.Figures
	if f.Steps != 4 || f.Samples != 16 || f.Votes != 16 || f.Errors != 0 || f.PromptTokens != 1600 || f.MaxSamplesInStep != 4 {
		t.Errorf("figures %+v, want 4 steps of 4 samples", f)
	}
	r := replayed(t, h)
	if r.Step != 4 || string(r.State) != "4" || !sameFigures(r.Acct.Figures, f) {
		t.Errorf("replayed: step %d state %s figures %+v, want %+v", r.Step, r.State, r.Acct.Figures, f)
	}
}

// replayed is a fresh machine of h's job rebuilt from h's journal.
func replayed(t *testing.T, h *harness) *Machine {
	t.Helper()
	r := New(h.m.spec, h.m.Inst, Config{Token: 2, Owner: "c2", CheckpointEvery: 1000})
	entries := func(yield func(uint64, *schemas.JournalEntry) bool) {
		for i := range h.entries {
			if !yield(uint64(i+1), &h.entries[i]) {
				return
			}
		}
	}
	if _, err := r.Replay(entries); err != nil {
		t.Fatal(err)
	}
	return r
}

func sameFigures(a, b schemas.Figures) bool {
	ja, _ := schemas.Encode(&schemas.JobReport{Header: schemas.NewHeader(schemas.KindJobReport), Tenant: "t", JobID: "j", Task: "walk", K: 1, State: schemas.StateSolved, Solved: true, Figures: a})
	jb, _ := schemas.Encode(&schemas.JobReport{Header: schemas.NewHeader(schemas.KindJobReport), Tenant: "t", JobID: "j", Task: "walk", K: 1, State: schemas.StateSolved, Solved: true, Figures: b})
	return string(ja) == string(jb)
}

// TestMachineResults: each kind of result message gets its fate, and its
// tokens and waste are accounted.
func TestMachineResults(t *testing.T) {
	type check func(t *testing.T, h *harness, acts []Action)
	cases := []struct {
		name  string
		msg   func(h *harness) Incoming
		want  string // the actions, described
		check check
	}{
		{"unreadable", func(*harness) Incoming { return Incoming{Data: []byte("{")} }, "term #0",
			func(t *testing.T, h *harness, _ []Action) {
				if h.m.Acct.MalformedMessages != 1 {
					t.Error("not counted malformed")
				}
			}},
		{"another job's", func(h *harness) Incoming {
			r := *h.queue[0]
			r.JobID = "other"
			r.SampleID = schemas.SampleID(r.Tenant, r.JobID, r.Step, r.Epoch, r.Index, r.Attempt)
			return Incoming{Data: h.result(&r, right(0))}
		}, "term #0", nil},
		{"another step's", func(h *harness) Incoming {
			r := *h.queue[0]
			r.Step = 5
			h.sign(&r)
			return Incoming{Data: h.result(&r, right(0))}
		}, "ack #0", func(t *testing.T, h *harness, _ []Action) {
			if h.m.Acct.LateSamples != 1 || h.m.Acct.PromptTokens != 100 {
				t.Errorf("late %d, tokens %d: a late answer is waste, paid for", h.m.Acct.LateSamples, h.m.Acct.PromptTokens)
			}
		}},
		{"an index never published", func(h *harness) Incoming {
			r := *h.queue[0]
			r.Index = 9
			h.sign(&r)
			return Incoming{Data: h.result(&r, right(0))}
		}, "term #0", nil},
		{"a vote the task cannot read", func(h *harness) Incoming { return Incoming{Data: h.result(h.queue[0], "garbage")} }, "term #0",
			func(t *testing.T, h *harness, _ []Action) {
				if h.m.Acct.MalformedMessages != 1 || len(h.m.seen) != 0 {
					t.Error("an unreadable vote was counted")
				}
			}},
		{"skipped: asked again", func(h *harness) Incoming { return Incoming{Data: h.result(h.queue[0], "skipped")} }, "ack #0, publish 0/1",
			func(t *testing.T, h *harness, _ []Action) {
				if h.m.Acct.SkippedSamples != 1 {
					t.Error("skip not counted")
				}
			}},
		{"forged: another index's token", func(h *harness) Incoming {
			r := *h.queue[0]
			r.Token = h.queue[1].Token
			return Incoming{Data: h.result(&r, right(0))}
		}, "term #0", func(t *testing.T, h *harness, _ []Action) {
			if f := h.m.Acct.Figures; f.ForgedResults != 1 || f.PromptTokens != 0 || f.MalformedMessages != 0 || len(h.m.seen) != 0 {
				t.Errorf("forged %d, tokens %d, malformed %d, seen %v: want one forged result, nothing counted", f.ForgedResults, f.PromptTokens, f.MalformedMessages, h.m.seen)
			}
			if len(h.m.Verified[0]) != 0 {
				t.Errorf("verified %q: the budget would release the named sample's reservation", h.m.Verified[0])
			}
		}},
		{"forged: no token", func(h *harness) Incoming {
			r := *h.queue[0]
			r.Token = ""
			return Incoming{Data: h.result(&r, right(0))}
		}, "term #0", func(t *testing.T, h *harness, _ []Action) {
			if h.m.Acct.ForgedResults != 1 {
				t.Error("not counted forged")
			}
		}},
		{"overclaim: counted as a red flag, charged at the bound", func(h *harness) Incoming {
			return Incoming{Data: h.resultWith(h.queue[0], right(0), func(r *schemas.SampleResult) {
				r.PromptTokens, r.CompletionTokens = 50_000_000_000, 50_000_000_000
			})}
		}, "record 1, ack #0, publish 2/0", func(t *testing.T, h *harness, _ []Action) {
			f := h.m.Acct.Figures
			wantPrompt := pricing.PromptTokensBound(walkPrompt(0))
			if h.m.seen[0] != schemas.RedFlagOverclaim || f.OverclaimedResults != 1 ||
				f.PromptTokens != wantPrompt || f.CompletionTokens != int64(h.m.spec.MaxOutputTokens) {
				t.Errorf("seen %q, overclaimed %d, tokens %d/%d: want the red flag overclaim charged at %d/%d",
					h.m.seen[0], f.OverclaimedResults, f.PromptTokens, f.CompletionTokens, wantPrompt, h.m.spec.MaxOutputTokens)
			}
		}},
		// k=2: a vote leads by 1 with one sample uncounted, so nothing more
		// is needed yet; a red flag counts for nobody and is replaced.
		{"a vote", func(h *harness) Incoming { return Incoming{Data: h.result(h.queue[0], right(0))} }, "record 1, ack #0",
			func(t *testing.T, h *harness, _ []Action) {
				if len(h.m.Verified[0]) != 1 || h.m.Verified[0][0] != h.sent[0].SampleID {
					t.Errorf("verified %q, want the sample id %q (its reservation is released)", h.m.Verified[0], h.sent[0].SampleID)
				}
			}},
		{"a red flag", func(h *harness) Incoming { return Incoming{Data: h.result(h.queue[0], "!parse")} }, "record 1, ack #0, publish 2/0",
			func(t *testing.T, h *harness, _ []Action) {
				if h.m.seen[0] != "parse" {
					t.Error("red flag not held")
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, spec(2, 100), 3, byIndex(rightAns))
			h.start()
			n := len(h.acts)
			h.do(nil, h.m.OnResults(h.now, []Incoming{tc.msg(h)}))
			if got := strings.Join(h.acts[n:], ", "); got != tc.want {
				t.Errorf("actions %q, want %q", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, h, nil)
			}
		})
	}
}

// TestMachineSkipsBounded: an index voters keep skipping is asked again at
// once only maxSkips times; then it waits for the sample timeout.
func TestMachineSkipsBounded(t *testing.T) {
	h := newHarness(t, spec(1, 100), 3, byIndex(constAns("skipped")))
	h.start()
	for range maxSkips + 2 {
		h.deliver(-1)
	}
	if n := len(h.sent); n != 1+maxSkips {
		t.Errorf("published %d times, want 1 + %d re-publishes", n, maxSkips)
	}
}

// TestMachineRecordOutcomes: what Redis said about each sample.
func TestMachineRecordOutcomes(t *testing.T) {
	t.Run("duplicate of an answer held", func(t *testing.T) {
		h := newHarness(t, spec(3, 100), 3, byIndex(rightAns))
		h.start()
		dup := *h.queue[0]
		h.deliver(1)
		tokens := h.m.Acct.PromptTokens
		// The same sample answered again and again while its step is
		// open (a leaked voter's credentials publish it under new message
		// ids): counted, never billed again.
		for range 5 {
			h.do(nil, h.m.OnResults(h.now, []Incoming{{Data: h.result(&dup, right(0))}}))
		}
		if h.m.Acct.DuplicateResults != 5 || h.m.Acct.PromptTokens != tokens {
			t.Errorf("duplicates %d, tokens %d → %d; want 5 counted and none billed", h.m.Acct.DuplicateResults, tokens, h.m.Acct.PromptTokens)
		}
		// Another attempt at the index (a re-sample the job asked for)
		// is a call of the job's: waste, paid for.
		again := dup
		again.Attempt++
		h.sign(&again)
		h.do(nil, h.m.OnResults(h.now, []Incoming{{Data: h.result(&again, right(0))}}))
		if h.m.Acct.DuplicateResults != 6 || h.m.Acct.PromptTokens != tokens+100 {
			t.Errorf("a re-sample's duplicate: duplicates %d, tokens %d → %d; want it billed", h.m.Acct.DuplicateResults, tokens, h.m.Acct.PromptTokens)
		}
	})
	t.Run("stale: sampled again under a new epoch", func(t *testing.T) {
		h := newHarness(t, spec(2, 100), 3, byIndex(rightAns))
		h.start()
		h.tally.Open(0, h.m.Epoch+5) // another owner's epoch in Redis
		epoch := h.m.Epoch
		h.deliver(1)
		if h.m.Epoch != epoch+1 || h.m.dispatched != 2 {
			t.Fatalf("epoch %d (was %d), dispatched %d: want a new epoch and a fresh wave", h.m.Epoch, epoch, h.m.dispatched)
		}
		if h.m.Acct.LateSamples != 1 {
			t.Errorf("late %d: the stale answer is waste", h.m.Acct.LateSamples)
		}
	})
	t.Run("record failed: handed back", func(t *testing.T) {
		h := newHarness(t, spec(2, 100), 3, byIndex(rightAns))
		h.start()
		acts := h.m.OnResults(h.now, []Incoming{{Data: h.result(h.queue[0], right(0))}})
		if len(acts) != 1 || acts[0].Kind != ActRecord {
			t.Fatalf("actions %s", describe(acts))
		}
		acts, err := h.m.RecordFailed(h.now, errFake)
		if err != nil || describe(acts) != "nak #0" || h.m.Acct.PromptTokens != 0 {
			t.Errorf("actions %s, err %v, tokens %d: want the result handed back, unaccounted", describe(acts), err, h.m.Acct.PromptTokens)
		}
	})
	t.Run("tally gone: acked and sampled again", func(t *testing.T) {
		h := newHarness(t, spec(2, 100), 3, byIndex(rightAns))
		h.start()
		h.m.OnResults(h.now, []Incoming{{Data: h.result(h.queue[0], right(0))}})
		acts, err := h.m.RecordFailed(h.now, store.ErrNoStep)
		if err != nil || describe(acts) != "ack #0, open, publish 0/0, publish 1/0" {
			t.Errorf("actions %s, err %v", describe(acts), err)
		}
	})
}

// TestMachineBoundary: what a decision leads to at the step boundary.
func TestMachineBoundary(t *testing.T) {
	cases := []struct {
		name    string
		control string
		every   int
		steps   int64
		want    string // the actions after the decision's journal entry
		end     string
	}{
		{"next wave", schemas.ControlRun, 1000, 3, "publish 0/0, ack #0", ""},
		{"checkpoint due", schemas.ControlRun, 1, 3, "checkpoint, publish 0/0, ack #0", ""},
		{"pause", schemas.ControlPause, 1000, 3, "checkpoint, pause, ack #0", ""},
		{"cancel", schemas.ControlCancel, 1000, 3, "end, ack #0", schemas.StateCancelled},
		{"last step", schemas.ControlRun, 1000, 1, "end, ack #0", schemas.StateSolved},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, spec(1, 100), tc.steps, byIndex(rightAns))
			h.m.every = tc.every
			h.start()
			h.m.Control = tc.control
			n := len(h.acts)
			h.deliver(1)
			got := strings.Join(h.acts[n:], ", ")
			if i := strings.Index(got, "journal decision, "); i >= 0 {
				got = got[i+len("journal decision, "):]
			}
			if got != tc.want {
				t.Errorf("after the decision: %q, want %q", got, tc.want)
			}
			if tc.end != "" && (h.m.End == nil || h.m.End.State != tc.end) {
				t.Errorf("end %+v, want %s", h.m.End, tc.end)
			}
		})
	}
}

// TestMachineOverdue: an unanswered sample is published again after the
// sample timeout, each attempt waiting twice as long (up to 16 timeouts),
// and never given up on (a rate limit must not kill the run).
func TestMachineOverdue(t *testing.T) {
	h := newHarness(t, spec(1, 100), 3, byIndex(rightAns))
	h.start()
	t0, timeout := h.now, time.Minute // the default sample timeout
	var at []time.Duration
	now := t0
	for range 8 {
		for {
			now = now.Add(time.Second)
			if acts := h.m.OnTick(now); len(acts) > 0 {
				at = append(at, now.Sub(t0))
				h.do(nil, acts)
				break
			}
		}
		t0 = now
	}
	want := []time.Duration{1, 2, 4, 8, 16, 16, 16, 16}
	for i, d := range at {
		if d != want[i]*timeout {
			t.Errorf("attempt %d after %v, want %v", i+1, d, want[i]*timeout)
		}
	}
	if h.m.Acct.Resampled != 8 {
		t.Errorf("resampled %d, want 8", h.m.Acct.Resampled)
	}
}

// TestMachineEscalation: a step that spends its cap climbs the ladder:
// the stronger model votes afresh under a new epoch (its requests name the
// model), then the panel arbitrates, then a person; each climb journaled.
func TestMachineEscalation(t *testing.T) {
	split := func(req *schemas.SampleRequest) string { // A, B, A, B, ...: never a lead of 2
		if req.Index%2 == 0 {
			return right(0)
		}
		return wrongAns(0)
	}
	t.Run("stronger model decides", func(t *testing.T) {
		s := spec(2, 4)
		s.Escalation = &schemas.EscalationPolicy{StrongerModel: "strong", StrongerSamples: 6}
		h := newHarness(t, s, 1, func(req *schemas.SampleRequest) string {
			if req.Model == "strong" {
				return right(0)
			}
			return split(req)
		})
		h.start()
		h.run()
		types := journalKinds(h.entries)
		if types != "escalation/stronger_model decision/stronger_model" || h.m.End == nil || h.m.End.State != schemas.StateSolved {
			t.Fatalf("journal %s, end %+v", types, h.m.End)
		}
		f := h.m.Acct.Figures
		if f.Escalations != 1 || f.Samples != 6 || f.MaxSamplesInStep != 6 || f.StrongerPromptTokens != 200 {
			t.Errorf("figures %+v: want 1 escalation, 4+2 samples in the step, the stronger model's 2 calls priced apart", f)
		}
		for _, r := range h.sent {
			if (r.Epoch > h.sent[0].Epoch) != (r.Model == "strong") {
				t.Errorf("request %s at epoch %d names model %q", r.SampleID, r.Epoch, r.Model)
			}
		}
	})
	t.Run("panel arbitrates", func(t *testing.T) {
		s := spec(2, 4)
		s.Escalation = &schemas.EscalationPolicy{Panel: true}
		h := newHarness(t, s, 1, split)
		h.arbiter = func(a *schemas.ArbitrationRequest) *schemas.ArbiterDecision {
			return &schemas.ArbiterDecision{Header: schemas.NewHeader(schemas.KindArbiterDecision), Tenant: "t", JobID: "j1",
				Step: a.Step, RequestID: "r", Outcome: schemas.ArbiterDecided, VoteKey: a.Candidates[0].VoteKey, Confidence: 0.9, CostUSD: 0.5}
		}
		h.start()
		h.run()
		if len(h.arbs) != 1 || len(h.arbs[0].Candidates) != 2 || h.arbs[0].Samples != 4 {
			t.Fatalf("arbitrations %+v, want one among the 2 candidates of 4 samples", h.arbs)
		}
		if k := journalKinds(h.entries); k != "escalation/panel arbiter/panel" {
			t.Fatalf("journal %s", k)
		}
		if f := h.m.Acct.Figures; f.ArbiterDecisions != 1 || f.ArbiterCostUSD != 0.5 || f.Samples != 4 || len(f.ArbiterSteps) != 1 {
			t.Errorf("figures %+v", f)
		}
	})
	t.Run("panel unsure: a person", func(t *testing.T) {
		s := spec(2, 4)
		s.Escalation = &schemas.EscalationPolicy{Panel: true}
		h := newHarness(t, s, 1, split)
		h.arbiter = func(a *schemas.ArbitrationRequest) *schemas.ArbiterDecision {
			return &schemas.ArbiterDecision{Outcome: schemas.ArbiterNeedsHuman, Reason: "unsure"}
		}
		h.start()
		h.run()
		if h.human != "unsure" || !h.m.Halted() || h.m.Rung != schemas.RungPanel {
			t.Fatalf("needs-human %q, halted %v, rung %q: want a pause for a person on the panel's rung", h.human, h.m.Halted(), h.m.Rung)
		}
		// A person's answer decides the step.
		acts, ok := h.m.Person(h.now, schemas.PersonDecision{Step: 0, VoteKey: right(0), By: "alice"})
		if !ok || describe(acts) != "journal arbiter/person" || h.m.Step != 1 {
			t.Errorf("person: %s, ok %v, step %d", describe(acts), ok, h.m.Step)
		}
	})
	t.Run("no candidate: a person", func(t *testing.T) {
		s := spec(2, 3)
		s.Escalation = &schemas.EscalationPolicy{Panel: true}
		h := newHarness(t, s, 1, byIndex(redFlag))
		h.start()
		h.run()
		if !strings.Contains(h.human, "no rung found a valid candidate") || len(h.arbs) != 0 {
			t.Errorf("needs-human %q after %d arbitrations", h.human, len(h.arbs))
		}
	})
	t.Run("stronger model spent too: no consensus names both rungs", func(t *testing.T) {
		s := spec(2, 4)
		s.Escalation = &schemas.EscalationPolicy{StrongerModel: "strong", StrongerSamples: 4}
		h := newHarness(t, s, 1, split)
		h.start()
		h.run()
		e := h.m.End
		if e == nil || e.State != schemas.StateNoConsensus || e.NoConsensus.Rung != schemas.RungStrongerModel || len(e.NoConsensus.Prior) != 1 {
			t.Fatalf("end %+v", e)
		}
		if f := h.m.Acct.Figures; f.Samples != 8 || f.MaxSamplesInStep != 8 {
			t.Errorf("figures %+v: both rungs' samples belong to the step", f)
		}
	})
}

func journalKinds(es []schemas.JournalEntry) string {
	var out []string
	for _, e := range es {
		out = append(out, e.Type+"/"+e.Rung)
	}
	return strings.Join(out, " ")
}

// TestMachineReplayResumesRung: a new owner replaying an escalation entry
// resumes the step on that rung with the rungs below known, instead of
// paying for them again.
func TestMachineReplayResumesRung(t *testing.T) {
	s := spec(2, 4)
	s.Escalation = &schemas.EscalationPolicy{StrongerModel: "strong", StrongerSamples: 6}
	h := newHarness(t, s, 2, func(req *schemas.SampleRequest) string {
		if req.Index%2 == 0 {
			return right(0)
		}
		return wrongAns(0)
	})
	h.start()
	h.run() // both rungs split: no consensus, after the climb
	var upTo []schemas.JournalEntry
	for _, e := range h.entries {
		upTo = append(upTo, e)
		if e.Type == schemas.EntryEscalation {
			break
		}
	}
	h.entries = upTo
	r := replayed(t, h)
	if r.Rung != schemas.RungStrongerModel || len(r.prior) != 1 || r.capN != 6 || r.Step != 0 {
		t.Errorf("replayed rung %q prior %d cap %d step %d", r.Rung, len(r.prior), r.capN, r.Step)
	}
}

// TestMachineLateAndDuplicateTokens: a copy of an answer the last decision
// counted, delivered again after it, is not paid for twice; the journal's
// changes never go negative and add up to the figures.
func TestMachineLateAndDuplicateTokens(t *testing.T) {
	h := newHarness(t, spec(1, 100), 3, byIndex(rightAns))
	h.start()
	first := *h.queue[0]
	h.deliver(1) // decides step 0
	tokens := h.m.Acct.PromptTokens
	h.do(nil, h.m.OnResults(h.now, []Incoming{{Data: h.result(&first, right(0))}}))
	if h.m.Acct.PromptTokens != tokens || h.m.Acct.LateSamples != 0 {
		t.Errorf("a copy of a counted answer: tokens %d → %d, late %d", tokens, h.m.Acct.PromptTokens, h.m.Acct.LateSamples)
	}
	h.run()
	var sum schemas.Figures
	for _, e := range h.entries {
		sum.Add(e.Work.Figures)
	}
	if !sameFigures(sum, h.m.Acct.Figures) {
		t.Errorf("entries add up to %+v, figures %+v", sum, h.m.Acct.Figures)
	}
}

// TestAccountsDeltaNeverNegative: tokens taken back after they were
// journaled (a duplicate of an answer the last decision counted) stay
// pending: no entry carries a negative figure, and the entries add up to
// the figures once later work sets the difference off.
func TestAccountsDeltaNeverNegative(t *testing.T) {
	var a accounts
	var journaled schemas.Figures
	entry := func() schemas.Figures {
		d := a.Delta().Figures
		journaled.Add(d)
		return d
	}
	a.PromptTokens, a.StrongerPromptTokens = 360, 240 // a stronger-rung decision
	if d := entry(); d.PromptTokens != 360 || d.StrongerPromptTokens != 240 {
		t.Fatalf("first entry %+v", d)
	}
	a.PromptTokens, a.StrongerPromptTokens = 240, 120 // a duplicate taken back
	a.PromptTokens += 240                             // the next step, the job's own model
	if d := entry(); d.PromptTokens != 120 || d.StrongerPromptTokens != 0 {
		t.Errorf("second entry %+v: want 120 prompt tokens and the stronger model's -120 pending", d)
	}
	a.PromptTokens, a.StrongerPromptTokens = a.PromptTokens+360, a.StrongerPromptTokens+360
	if d := entry(); d.StrongerPromptTokens != 240 {
		t.Errorf("third entry %+v: want 360 stronger tokens less the 120 pending", d)
	}
	if journaled.PromptTokens != a.PromptTokens || journaled.StrongerPromptTokens != a.StrongerPromptTokens {
		t.Errorf("entries add up to %+v, figures %d/%d", journaled, a.PromptTokens, a.StrongerPromptTokens)
	}
}

// TestMachineNoConsensusLogsTally: the no-consensus warning shows the tally
// as "key×votes", not Go struct syntax.
func TestMachineNoConsensusLogsTally(t *testing.T) {
	var buf lineBuffer
	h := newHarness(t, spec(3, 4), 2, byIndex(rightAns, wrongAns))
	h.m.log = slog.New(slog.NewTextHandler(&buf, nil))
	h.start()
	h.run()
	var line string
	for _, l := range buf.Lines() {
		if strings.Contains(l, "no consensus within the sample cap") {
			line = l
		}
	}
	if !strings.Contains(line, `tally="B@1×3, A@1×1"`) || strings.Contains(line, "{") {
		t.Errorf("warning %q: want the tally as key×votes", line)
	}
}

// lineBuffer is an io.Writer that keeps whole lines.
type lineBuffer struct{ b strings.Builder }

func (l *lineBuffer) Write(p []byte) (int, error) { return l.b.Write(p) }

func (l *lineBuffer) Lines() []string { return strings.Split(strings.TrimSpace(l.b.String()), "\n") }
