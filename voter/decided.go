package voter

import (
	"context"
	"sync"
	"time"
)

// trackerTTL is how long a job's last decision is remembered without news;
// bounded memory whatever the number of jobs seen.
const trackerTTL = 10 * time.Minute

// mark is the latest decided step of a job.
type mark struct {
	step, epoch int64
	seen        time.Time
}

// call is a model call in flight.
type call struct {
	step, epoch int64
	cancel      context.CancelFunc
}

// tracker remembers each job's latest decided step, so queued samples of
// decided steps are skipped and calls in flight for them cancelled.
type tracker struct {
	mu        sync.Mutex
	decided   map[string]mark
	inflight  map[string]map[*call]struct{}
	lastSweep time.Time
}

func newTracker() *tracker {
	return &tracker{decided: map[string]mark{}, inflight: map[string]map[*call]struct{}{}, lastSweep: time.Now()}
}

func jobKey(tenant, job string) string { return tenant + "/" + job }

// covers reports whether a decision at m makes (step, epoch) useless: the
// same epoch and not a later step. Other epochs are left alone: an event of
// an older owner (a zombie's) must never make a newer owner's requests look
// decided, and a re-opened step's new epoch starts clean.
func (m mark) covers(step, epoch int64) bool {
	return epoch == m.epoch && step <= m.step
}

func (t *tracker) isDecided(tenant, job string, step, epoch int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.decided[jobKey(tenant, job)]
	return ok && m.covers(step, epoch)
}

// decide records a decided step and cancels the calls it makes useless.
func (t *tracker) decide(tenant, job string, step, epoch int64) {
	now := time.Now()
	key := jobKey(tenant, job)
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.decided[key]
	if !ok || epoch != m.epoch || step > m.step {
		m = mark{step: step, epoch: epoch} // the latest event's epoch is the live run
	}
	m.seen = now
	t.decided[key] = m
	for c := range t.inflight[key] {
		if m.covers(c.step, c.epoch) {
			c.cancel()
		}
	}
	if now.Sub(t.lastSweep) > time.Minute {
		t.lastSweep = now
		for k, old := range t.decided {
			if now.Sub(old.seen) > trackerTTL {
				delete(t.decided, k)
			}
		}
	}
}

// register records a call in flight; the returned func forgets it.
func (t *tracker) register(tenant, job string, step, epoch int64, cancel context.CancelFunc) func() {
	key := jobKey(tenant, job)
	c := &call{step: step, epoch: epoch, cancel: cancel}
	t.mu.Lock()
	calls := t.inflight[key]
	if calls == nil {
		calls = map[*call]struct{}{}
		t.inflight[key] = calls
	}
	calls[c] = struct{}{}
	if m, ok := t.decided[key]; ok && m.covers(step, epoch) {
		cancel() // decided between the skip check and now
	}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(calls, c)
		if cur, ok := t.inflight[key]; ok && len(cur) == 0 {
			delete(t.inflight, key)
		}
		t.mu.Unlock()
	}
}
