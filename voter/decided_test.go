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

func TestTrackerDecideCancels(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	calls := map[string]flight{
		"earlier step":        register(t, tr, "j1", 3, 10),
		"decided step":        register(t, tr, "j1", 5, 10),
		"later step":          register(t, tr, "j1", 6, 10),
		"older epoch":         register(t, tr, "j1", 8, 9),
		"newer epoch":         register(t, tr, "j1", 2, 11),
		"other job, same ids": register(t, tr, "j2", 5, 10),
	}
	tr.decide("acme", "j1", 5, 10)
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
	tr.decide("acme", "j1", 2, 10)
	if !tr.isDecided("acme", "j1", 5, 10) {
		t.Error("an event for an earlier step undid the later decision")
	}
	tr.decide("acme", "j1", 9, 9)
	if tr.isDecided("acme", "j1", 6, 10) {
		t.Error("an event of an older epoch covered a later step of the newer one")
	}
	// Another epoch's event replaces the mark: only its own earlier steps
	// are decided; no other epoch is touched.
	tr.decide("acme", "j1", 1, 11)
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
	tr.decide("acme", "j", 4, 7)
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
		tr.decide("acme", fmt.Sprintf("old%d", i), 1, 1)
	}
	// Ten minutes pass without news of those jobs.
	tr.mu.Lock()
	for k, m := range tr.decided {
		m.seen = m.seen.Add(-trackerTTL - time.Second)
		tr.decided[k] = m
	}
	tr.lastSweep = time.Now().Add(-2 * time.Minute)
	tr.mu.Unlock()
	tr.decide("acme", "fresh", 1, 1) // any event sweeps, at most once a minute
	tr.mu.Lock()
	n := len(tr.decided)
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
	tr.decide("acme", "fresh2", 1, 1)
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
