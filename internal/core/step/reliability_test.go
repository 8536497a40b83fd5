package step

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/plan"
	"github.com/makerfleet/makerfleet/schemas"
)

// bernoulli answers a walk step right with chance p (a hash of the step
// and index, so every run and every owner hears the same answers), else
// with the one wrong answer (the formulas' worst case). On a hard step
// (hard(step)) a sample with the task's own prompt is right, or one of two
// wrong answers, with a third of a chance each: a long three-way race; a
// paraphrased one (PromptVariant > 0) is an ordinary sample.
func bernoulli(p float64, hard func(int64) bool) script {
	return func(req *schemas.SampleRequest) string {
		n, _ := strconv.Atoi(string(req.State))
		u := float64(SampleSeed(99, req.Step, req.Index)) / (1 << 31)
		switch {
		case hard != nil && hard(req.Step) && req.PromptVariant == 0:
			return [...]string{right(n), wrongAns(n), "C@" + strconv.Itoa(n+1)}[int(u*3)]
		case u < p:
			return right(n)
		}
		return wrongAns(n)
	}
}

// ks lists the k of each decision of a journal.
func ks(entries []schemas.JournalEntry) []int {
	var out []int
	for _, e := range entries {
		if e.Type == schemas.EntryDecision || e.Type == schemas.EntryArbiter {
			out = append(out, e.K)
		}
	}
	return out
}

// adaptiveSpec is a walk job asking for reliability target t.
func adaptiveSpec(k int, t, pEstimate float64) schemas.JobSpec {
	s := spec(k, 100)
	s.ReliabilityTarget, s.PEstimate = t, pEstimate
	return s
}

// TestAdaptiveKSchedule: without a prior the job starts at its k; as its
// votes bound p the margin falls to what the target needs for the steps
// left, never below the floor; every decision journals its k, and the
// receipt adds up.
func TestAdaptiveKSchedule(t *testing.T) {
	h := newHarness(t, adaptiveSpec(6, 0.95, 0), 400, bernoulli(0.9, nil))
	h.start()
	h.run()
	if e := h.m.End; e == nil || e.State != schemas.StateSolved {
		t.Fatalf("end %+v, want solved", e)
	}
	got := ks(h.entries)
	if len(got) != 400 || got[0] != 6 {
		t.Fatalf("k schedule %v: want 400 steps starting at the job's k 6", got)
	}
	if last := got[len(got)-1]; last >= 6 || last < schemas.DefaultKFloor {
		t.Errorf("last step's k %d: want below the starting 6 and at least the floor", last)
	}
	rep := schemas.JobReport{
		Header: schemas.NewHeader(schemas.KindJobReport), Tenant: "t", JobID: "j1", Task: "walk", K: 6,
		State: schemas.StateSolved, Solved: true, Figures: h.m.Acct.Figures.Clone(), TraceSHA256: "x",
	}
	h.m.FillReceipt(&rep)
	rec := rep.Receipt
	if err := rep.Validate(); err != nil {
		t.Fatalf("report with receipt does not validate: %v", err)
	}
	if rec.BoundSteps != 400 || rec.EvidenceSteps != 400 || rec.RightVotes+rec.WrongVotes != h.m.Acct.Votes {
		t.Errorf("receipt covers %d steps, evidence %d, votes %d+%d; want 400, 400, %d", rec.BoundSteps, rec.EvidenceSteps,
			rec.RightVotes, rec.WrongVotes, h.m.Acct.Votes)
	}
	if !(rec.PLow < 0.9 && 0.9 < rec.PHigh) {
		t.Errorf("p interval [%v, %v] misses the model's 0.9", rec.PLow, rec.PHigh)
	}
	if rec.BoundAchieved < 0.95 || rec.Target != 0.95 || rec.KFloor != schemas.DefaultKFloor {
		t.Errorf("bound %v target %v floor %d: want the target met", rec.BoundAchieved, rec.Target, rec.KFloor)
	}
	var n int64
	for _, r := range rec.KSchedule {
		for s := r.FromStep; s <= r.ToStep; s++ {
			if got[s] != r.K {
				t.Fatalf("schedule run %+v disagrees with step %d's k %d", r, s, got[s])
			}
			n++
		}
	}
	if n != 400 {
		t.Errorf("schedule covers %d steps, want 400", n)
	}
	t.Logf("k schedule %v; p̂ %.4f [%.4f, %.4f]; bound %.4f; %d samples", rec.KSchedule, rec.PHat, rec.PLow, rec.PHigh,
		rec.BoundAchieved, h.m.Acct.Samples)
}

// TestFixedKReceipt: a fixed-k job has a receipt too: one run, the bound
// at p_low, no target.
func TestFixedKReceipt(t *testing.T) {
	h := newHarness(t, spec(3, 100), 50, bernoulli(0.9, nil))
	h.start()
	h.run()
	rec := h.m.receipt()
	if len(rec.KSchedule) != 1 || rec.KSchedule[0] != (schemas.KRun{FromStep: 0, ToStep: 49, K: 3}) || rec.Target != 0 || rec.KFloor != 0 {
		t.Errorf("receipt schedule %v target %v floor %d: want one run of k=3, no target", rec.KSchedule, rec.Target, rec.KFloor)
	}
	if want := boundAt(rec.PLow, []schemas.KCount{{K: 3, Steps: 50}}); rec.BoundAchieved != want || !(want > 0 && want < 1) {
		t.Errorf("bound %v, want p_vote(p_low, 3)^50 = %v", rec.BoundAchieved, want)
	}
	if got := ks(h.entries); slices.ContainsFunc(got, func(k int) bool { return k != 3 }) {
		t.Errorf("entries' k %v, want 3 throughout", got)
	}
}

// TestAdaptiveKResume: a new owner, from a checkpoint (encoded and read
// back) or from the journal alone, chooses the same k for the open step
// as the owner before, and the job goes on to the same schedule as an
// uninterrupted run.
func TestAdaptiveKResume(t *testing.T) {
	sp := adaptiveSpec(3, 0.99, 0.85)
	answers := bernoulli(0.85, nil)
	whole := newHarness(t, sp, 300, answers)
	whole.start()
	whole.run()
	want := ks(whole.entries)

	h := newHarness(t, sp, 300, answers)
	h.start()
	for h.m.Step < 137 && len(h.queue) > 0 {
		h.deliver(1)
	}
	if h.m.Step != 137 {
		t.Fatalf("stopped at step %d (end %+v)", h.m.Step, h.m.End)
	}
	old := h.m
	c, err := old.Snapshot(h.now, uint64(len(h.entries)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data, err := schemas.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	var back schemas.Checkpoint
	if err := schemas.Decode(data, &back); err != nil {
		t.Fatalf("checkpoint with a receipt does not read back: %v", err)
	}
	fromCkpt := New(sp, old.Inst, Config{Token: 2, Owner: "c2", CheckpointEvery: 1000})
	fromCkpt.spec = old.spec
	if err := fromCkpt.Restore(&back); err != nil {
		t.Fatal(err)
	}
	fromJournal := replayed(t, h)
	for name, m := range map[string]*Machine{"checkpoint": fromCkpt, "journal": fromJournal} {
		if m.Step != old.Step || m.K() != old.K() {
			t.Errorf("from the %s: step %d k %d, want step %d k %d", name, m.Step, m.K(), old.Step, old.K())
		}
		if a, b := m.receipt(), old.receipt(); a.PLow != b.PLow || a.BoundAchieved != b.BoundAchieved || len(a.KSchedule) != len(b.KSchedule) {
			t.Errorf("from the %s: receipt p_low %v bound %v runs %d, want %v %v %d", name, a.PLow, a.BoundAchieved,
				len(a.KSchedule), b.PLow, b.BoundAchieved, len(b.KSchedule))
		}
	}
	// The new owner goes on from the checkpoint: the old one's requests
	// are stale.
	h.m, h.queue = fromCkpt, nil
	h.do(nil, []Action{fromCkpt.Open()})
	h.start()
	h.run()
	if got := ks(h.entries); !slices.Equal(got, want) {
		t.Errorf("resumed schedule differs from the uninterrupted one:\n got %v\nwant %v", got, want)
	}
}

// TestDecorrelation: on a hard step (a three-way race on its own prompt)
// the samples from the correlation threshold on are paraphrased, at the
// job's decorrelation temperature, from its models in turn; the step is
// counted and listed; with decorrelation off it is counted only, and the
// job takes more samples and decides more steps wrong.
func TestDecorrelation(t *testing.T) {
	hard := func(s int64) bool { return s%10 == 7 }
	run := func(mode string) *harness {
		sp := spec(3, 200)
		sp.PEstimate, sp.Decorrelate, sp.DecorrelateTemperature, sp.Models = 0.9, mode, 0.7, []string{"m1", "m2"}
		h := newHarness(t, sp, 200, bernoulli(0.9, hard))
		h.start()
		h.run()
		if e := h.m.End; e == nil || e.State != schemas.StateSolved && e.State != schemas.StateUnsolved {
			t.Fatalf("%s: end %+v", mode, e)
		}
		return h
	}
	on, off := run(schemas.DecorrelateOn), run(schemas.DecorrelateOff)
	if on.m.Acct.CorrelatedSteps == 0 || on.m.Acct.DecorrelatedSamples == 0 {
		t.Fatalf("decorrelation on: %d correlated steps, %d decorrelated samples; want some", on.m.Acct.CorrelatedSteps, on.m.Acct.DecorrelatedSamples)
	}
	if off.m.Acct.CorrelatedSteps == 0 || off.m.Acct.DecorrelatedSamples != 0 {
		t.Errorf("decorrelation off: %d correlated steps, %d decorrelated samples; want some and none", off.m.Acct.CorrelatedSteps, off.m.Acct.DecorrelatedSamples)
	}
	variants := 0
	for _, req := range on.sent {
		if req.PromptVariant == 0 {
			if req.Model != "" || req.Temperature == 0.7 {
				t.Errorf("plain request %s: model %q temperature %v", req.SampleID, req.Model, req.Temperature)
			}
			continue
		}
		variants++
		if req.Temperature != 0.7 || req.Model != []string{"m1", "m2"}[(req.PromptVariant-1)%2] || !hard(req.Step) {
			t.Errorf("decorrelated request %s: variant %d model %q temperature %v (hard step %v)", req.SampleID,
				req.PromptVariant, req.Model, req.Temperature, hard(req.Step))
		}
	}
	for _, req := range off.sent {
		if req.PromptVariant != 0 || req.Model != "" {
			t.Fatalf("decorrelation off, yet request %s has variant %d model %q", req.SampleID, req.PromptVariant, req.Model)
		}
	}
	rec := on.m.receipt()
	listed := 0
	for _, s := range rec.Steps {
		if s.Correlated {
			listed++
			if !hard(s.Step) || s.Decorrelated == 0 {
				t.Errorf("listed step %+v: want a hard step with decorrelated samples", s)
			}
		}
	}
	if int64(listed) != on.m.Acct.CorrelatedSteps || rec.CorrelatedSteps != on.m.Acct.CorrelatedSteps {
		t.Errorf("%d correlated steps listed, receipt %d, figures %d", listed, rec.CorrelatedSteps, on.m.Acct.CorrelatedSteps)
	}
	if on.m.Acct.Samples >= off.m.Acct.Samples || on.m.Acct.Errors > off.m.Acct.Errors {
		t.Errorf("decorrelation on drew %d samples (%d wrong steps), off %d (%d): want fewer", on.m.Acct.Samples, on.m.Acct.Errors,
			off.m.Acct.Samples, off.m.Acct.Errors)
	}
	t.Logf("hard steps: on %d samples, %d wrong (%d correlated steps, %d decorrelated samples, %d variant requests); off %d samples, %d wrong (%d correlated)",
		on.m.Acct.Samples, on.m.Acct.Errors, on.m.Acct.CorrelatedSteps, on.m.Acct.DecorrelatedSamples, variants,
		off.m.Acct.Samples, off.m.Acct.Errors, off.m.Acct.CorrelatedSteps)
	// A new owner replaying the journal has the same receipt.
	if got := replayed(t, on).receipt(); got.CorrelatedSteps != rec.CorrelatedSteps || !slices.Equal(got.Steps, rec.Steps) {
		t.Errorf("replayed receipt: %d correlated, steps %v; want %d, %v", got.CorrelatedSteps, got.Steps, rec.CorrelatedSteps, rec.Steps)
	}
}

// TestReliabilityFigures prints docs/statistics.md's table: samples per
// step of adaptive k against a fixed k_min at the true p (the oracle) and
// at a pessimistic p (twice the true error rate), on walk jobs whose votes
// are right with chance p and wrong all for the same answer, target 0.95;
// adaptive starts from the pessimistic k with the pessimistic p as its
// prior. Each run decides every step right here.
func TestReliabilityFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("figures for the docs")
	}
	const target = 0.95
	for _, c := range []struct {
		p     float64
		steps int64
	}{{0.9, 1023}, {0.9, 4095}, {0.99, 8191}, {0.998, 8191}} {
		pPess := c.p - (1 - c.p)
		kOracle, _ := plan.KMin(c.p, c.steps, target)
		kPess, _ := plan.KMin(pPess, c.steps, target)
		run := func(k int, adaptive bool) (*harness, float64) {
			sp := spec(k, 100)
			sp.PEstimate = pPess
			if adaptive {
				sp.ReliabilityTarget = target
			}
			h := newHarness(t, sp, c.steps, bernoulli(c.p, nil))
			h.start()
			h.run()
			if h.m.Acct.Steps != c.steps {
				t.Fatalf("p=%v: %d of %d steps decided", c.p, h.m.Acct.Steps, c.steps)
			}
			return h, float64(h.m.Acct.Samples) / float64(c.steps)
		}
		_, oracle := run(kOracle, false)
		_, pess := run(kPess, false)
		h, adapt := run(kPess, true)
		rec := h.m.receipt()
		last := rec.KSchedule[len(rec.KSchedule)-1].K
		t.Logf("p=%v steps=%d: oracle k=%d %.2f samples/step; pessimistic p=%.3f k=%d %.2f; adaptive %.2f (%.0f%% of pessimistic, last k %d, %d errors), p̂ %.4f [%.4f, %.4f], bound %.4f",
			c.p, c.steps, kOracle, oracle, pPess, kPess, pess, adapt, 100*adapt/pess, last, h.m.Acct.Errors, rec.PHat, rec.PLow, rec.PHigh, rec.BoundAchieved)
		if rec.BoundAchieved < target || adapt >= pess {
			t.Errorf("p=%v: adaptive bound %v (target %v), %.2f samples/step vs %.2f pessimistic", c.p, rec.BoundAchieved, target, adapt, pess)
		}
	}
}
