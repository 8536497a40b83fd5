package voter

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestMarkCovers(t *testing.T) {
	t.Parallel()
	m := mark{step: 5, epoch: 10}
	cases := []struct {
		step, epoch int64
		want        bool
		why         string
	}{
		{5, 10, true, "the decided step itself"},
		{4, 10, true, "an earlier step of the same epoch"},
		{0, 10, true, "the first step of the same epoch"},
		{6, 10, false, "a later step of the same epoch is still to be decided"},
		{100, 9, false, "another epoch, even a smaller one, may be a newer run"},
		{0, 9, false, "an early step of another epoch"},
		{5, 11, false, "the same step under a newer epoch (the step was reopened)"},
		{0, 11, false, "a newer epoch restarts from scratch"},
	}
	for _, c := range cases {
		if got := m.covers(c.step, c.epoch); got != c.want {
			t.Errorf("mark %+v covers(step %d, epoch %d) = %v, want %v: %s", m, c.step, c.epoch, got, c.want, c.why)
		}
	}
}

// flight is a registered call and whether it has been cancelled.
type flight struct {
	ctx        context.Context
	unregister func()
}

func (f flight) cancelled() bool { return f.ctx.Err() != nil }

func register(t *testing.T, tr *tracker, job string, step, epoch int64) flight {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return flight{ctx: ctx, unregister: tr.register("acme", job, step, epoch, cancel)}
}

// decide gives tr a notice, failing t if tr ignores it.
func decide(t *testing.T, tr *tracker, job string, step, epoch int64) {
	t.Helper()
	if ok, hi := tr.decide("acme", job, step, epoch); !ok {
		t.Fatalf("notice for %s step %d epoch %d ignored (highest requested %d)", job, step, epoch, hi)
	}
}

func TestTrackerDecideCancels(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	// The voter has seen requests up to step 8 in epochs 9, 10 and 11.
	for _, e := range []int64{9, 10, 11} {
		tr.request("acme", "j1", 8, e)
	}
	calls := map[string]flight{
		"earlier step":        register(t, tr, "j1", 3, 10),
		"decided step":        register(t, tr, "j1", 5, 10),
		"later step":          register(t, tr, "j1", 6, 10),
		"older epoch":         register(t, tr, "j1", 8, 9),
		"newer epoch":         register(t, tr, "j1", 2, 11),
		"other job, same ids": register(t, tr, "j2", 5, 10),
	}
	decide(t, tr, "j1", 5, 10)
	want := map[string]bool{
		"earlier step": true, "decided step": true, "older epoch": false,
		"later step": false, "newer epoch": false, "other job, same ids": false,
	}
	for name, f := range calls {
		if f.cancelled() != want[name] {
			t.Errorf("%s: cancelled %v, want %v", name, f.cancelled(), want[name])
		}
	}
	// An older event does not move the mark back.
	decide(t, tr, "j1", 2, 10)
	if !tr.isDecided("acme", "j1", 5, 10) {
		t.Error("an event for an earlier step undid the later decision")
	}
	decide(t, tr, "j1", 9, 9)
	if tr.isDecided("acme", "j1", 6, 10) {
		t.Error("an event of an older epoch covered a later step of the newer one")
	}
	// Another epoch's event replaces the mark: only its own earlier steps
	// are decided; no other epoch is touched.
	decide(t, tr, "j1", 1, 11)
	if calls["newer epoch"].cancelled() {
		t.Error("step 2 of epoch 11 cancelled by a decision of its step 1")
	}
	if calls["later step"].cancelled() {
		t.Error("step 6 of epoch 10 cancelled by an event of epoch 11")
	}
	if !tr.isDecided("acme", "j1", 1, 11) || tr.isDecided("acme", "j1", 2, 11) || tr.isDecided("acme", "j1", 7, 10) {
		t.Error("after epoch 11 step 1: only epoch 11 up to step 1 is decided")
	}
	for _, f := range calls {
		f.unregister()
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.inflight) != 0 {
		t.Errorf("%d jobs still have calls in flight after every call unregistered", len(tr.inflight))
	}
}

func TestTrackerRegisterAfterDecide(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	tr.request("acme", "j", 4, 7)
	decide(t, tr, "j", 4, 7)
	// The step was decided between the voter's skip check and its model
	// call: registering cancels at once.
	if f := register(t, tr, "j", 4, 7); !f.cancelled() {
		t.Error("a call registered for a decided step was not cancelled")
	}
	if f := register(t, tr, "j", 2, 6); f.cancelled() {
		t.Error("a call registered for another epoch was cancelled")
	}
	if f := register(t, tr, "j", 5, 7); f.cancelled() {
		t.Error("a call for the next step was cancelled")
	}
	// Unregistering twice, or after the call ended, is harmless.
	f := register(t, tr, "j", 5, 7)
	f.unregister()
	f.unregister()
}

func TestTrackerMemoryIsBounded(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	for i := range 1000 {
		tr.request("acme", fmt.Sprintf("old%d", i), 1, 1)
		decide(t, tr, fmt.Sprintf("old%d", i), 1, 1)
	}
	// Ten minutes pass without news of those jobs.
	tr.mu.Lock()
	for _, js := range tr.jobs {
		js.seen = js.seen.Add(-trackerTTL - time.Second)
	}
	tr.lastSweep = time.Now().Add(-2 * time.Minute)
	tr.mu.Unlock()
	tr.request("acme", "fresh", 1, 1) // any request or notice sweeps, at most once a minute
	decide(t, tr, "fresh", 1, 1)
	tr.mu.Lock()
	n := len(tr.jobs)
	tr.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d jobs remembered after the sweep, want only the fresh one", n)
	}
	if !tr.isDecided("acme", "fresh", 1, 1) || tr.isDecided("acme", "old1", 1, 1) {
		t.Error("the sweep dropped the wrong jobs")
	}
	// A job heard from recently is kept by the sweep.
	tr.mu.Lock()
	tr.lastSweep = time.Now().Add(-2 * time.Minute)
	tr.mu.Unlock()
	tr.request("acme", "fresh2", 1, 1)
	if !tr.isDecided("acme", "fresh", 1, 1) {
		t.Error("the sweep dropped a job decided a moment ago")
	}
	// Calls in flight are forgotten when they end, whatever the decisions.
	var fs []flight
	for i := range 100 {
		fs = append(fs, register(t, tr, fmt.Sprintf("busy%d", i), 0, 1))
	}
	for _, f := range fs {
		f.unregister()
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.inflight) != 0 {
		t.Errorf("%d jobs in the in-flight map after every call ended", len(tr.inflight))
	}
}

// TestTrackerNoticeWindow: finding 2 of issue 9. A notice counts only for
// a step at most one beyond the highest this voter has seen requested for
// the job in the notice's epoch; any other is ignored and changes
// nothing, so a forged notice naming step 2^40 cannot make the voter skip
// the job's later steps.
func TestTrackerNoticeWindow(t *testing.T) {
	t.Parallel()
	const E = 3 << 20
	cases := []struct {
		name        string
		requested   []int64 // steps requested in epoch E before the notice
		noticeStep  int64
		noticeEpoch int64
		accepted    bool
		highest     int64
	}{
		{"a job never requested", nil, 0, E, false, -1},
		{"step 2^40", []int64{0, 1, 2}, 1 << 40, E, false, 2},
		{"two beyond", []int64{0, 1, 2}, 4, E, false, 2},
		{"one beyond", []int64{0, 1, 2}, 3, E, true, 2},
		{"the highest requested", []int64{0, 1, 2}, 2, E, true, 2},
		{"an earlier step", []int64{5, 1}, 3, E, true, 5},
		{"an epoch never requested", []int64{0, 1, 2}, 1, E + 1, false, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tr := newTracker()
			for _, s := range c.requested {
				tr.request("acme", "j", s, E)
			}
			ok, hi := tr.decide("acme", "j", c.noticeStep, c.noticeEpoch)
			if ok != c.accepted || hi != c.highest {
				t.Fatalf("decide(step %d, epoch %d) = %v, %d; want %v, %d", c.noticeStep, c.noticeEpoch, ok, hi, c.accepted, c.highest)
			}
			// What the voter does with the job's next requests.
			for step := int64(0); step < 8; step++ {
				want := c.accepted && c.noticeEpoch == E && step <= c.noticeStep
				if got := tr.isDecided("acme", "j", step, E); got != want {
					t.Errorf("step %d: decided %v, want %v", step, got, want)
				}
			}
			if !c.accepted {
				next := int64(6)
				if len(c.requested) > 0 {
					next = c.requested[0] + 1
				}
				if tr.request("acme", "j", next, E) {
					t.Errorf("a genuine request for step %d skipped after an ignored notice", next)
				}
			}
		})
	}
}

// TestTrackerEpochsBounded: a job keeps the requested steps of its newest
// maxEpochs epochs only, whatever the epochs requests name.
func TestTrackerEpochsBounded(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	for e := int64(1); e <= 100; e++ {
		tr.request("acme", "j", e, e)
	}
	tr.mu.Lock()
	n := len(tr.jobs[jobKey("acme", "j")].requested)
	tr.mu.Unlock()
	if n != maxEpochs {
		t.Errorf("%d epochs remembered, want %d", n, maxEpochs)
	}
	if ok, _ := tr.decide("acme", "j", 100, 100); !ok {
		t.Error("the newest epoch was forgotten")
	}
	if ok, _ := tr.decide("acme", "j", 1, 1); ok {
		t.Error("the oldest epoch was kept")
	}
}
