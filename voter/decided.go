package voter

import (
	"context"
	"sync"
	"time"
)

// trackerTTL is how long a job is remembered without news (a request or
// an accepted notice); bounded memory whatever the number of jobs seen.
const trackerTTL = 10 * time.Minute

// maxEpochs bounds the epochs whose requested steps a job keeps: the live
// run's and a few older ones (a zombie owner's, a reopened step's), the
// newest kept. A request naming a new epoch pushes the oldest one out.
const maxEpochs = 4

// mark is the latest decided step of a job.
type mark struct {
	step, epoch int64
}

// call is a model call in flight.
type call struct {
	step, epoch int64
	cancel      context.CancelFunc
}

// jobState is what a voter knows of one job.
type jobState struct {
	// requested maps an epoch to the highest step this voter has pulled a
	// request for: the window a decided notice must fall in.
	requested map[int64]int64
	// decided is the latest accepted notice (when hasMark).
	decided mark
	hasMark bool
	seen    time.Time
}

// tracker remembers each job's latest decided step, so queued samples of
// decided steps are skipped and calls in flight for them cancelled.
//
// A decided notice is a claim, and on a fleet without authorization anyone
// may send one: a notice naming step 2^40 once made a voter skip every
// request of its job. So a notice is accepted only for a step at most one
// beyond the highest step this voter has seen requested for that job in
// the notice's epoch (the coordinator publishes a step's requests before
// it can decide it; one beyond, because other voters may have taken all
// of the next step's requests). Any other notice is ignored and changes
// nothing, so a later request of the job is never skipped because of it.
// A forged notice within the window (the open step) would still be
// believed: only the server's permissions stop that (step-decided subjects
// are the coordinator's to publish, docs/security.md).
type tracker struct {
	mu        sync.Mutex
	jobs      map[string]*jobState
	inflight  map[string]map[*call]struct{}
	lastSweep time.Time
}

func newTracker() *tracker {
	return &tracker{jobs: map[string]*jobState{}, inflight: map[string]map[*call]struct{}{}, lastSweep: time.Now()}
}

func jobKey(tenant, job string) string { return tenant + "/" + job }

// covers reports whether a decision at m makes (step, epoch) useless: the
// same epoch and not a later step. Other epochs are left alone: an event of
// an older owner (a zombie's) must never make a newer owner's requests look
// decided, and a re-opened step's new epoch starts clean.
func (m mark) covers(step, epoch int64) bool {
	return epoch == m.epoch && step <= m.step
}

// request records a request this voter pulled and reports whether its step
// is decided already, so it is answered "skipped" without a model call.
func (t *tracker) request(tenant, job string, step, epoch int64) (skip bool) {
	now := time.Now()
	key := jobKey(tenant, job)
	t.mu.Lock()
	defer t.mu.Unlock()
	js := t.jobs[key]
	if js == nil {
		js = &jobState{requested: map[int64]int64{}}
		t.jobs[key] = js
	}
	js.seen = now
	if hi, ok := js.requested[epoch]; !ok || step > hi {
		js.requested[epoch] = step
	}
	if len(js.requested) > maxEpochs {
		oldest := epoch
		for e := range js.requested {
			oldest = min(oldest, e)
		}
		delete(js.requested, oldest)
	}
	t.sweep(now)
	return js.hasMark && js.decided.covers(step, epoch)
}

// isDecided reports whether (step, epoch) of a job is covered by an
// accepted notice.
func (t *tracker) isDecided(tenant, job string, step, epoch int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	js := t.jobs[jobKey(tenant, job)]
	return js != nil && js.hasMark && js.decided.covers(step, epoch)
}

// decide takes a decided notice: if its step is within the window of the
// job's requested steps in its epoch, it is recorded and the calls it makes
// useless are cancelled. ok is false for a notice it ignored; highest is
// then the highest step requested in that epoch (-1: none).
func (t *tracker) decide(tenant, job string, step, epoch int64) (ok bool, highest int64) {
	now := time.Now()
	key := jobKey(tenant, job)
	t.mu.Lock()
	defer t.mu.Unlock()
	js := t.jobs[key]
	if js == nil {
		return false, -1
	}
	hi, seen := js.requested[epoch]
	if !seen {
		return false, -1
	}
	if step > hi+1 {
		return false, hi
	}
	if !js.hasMark || epoch != js.decided.epoch || step > js.decided.step {
		js.decided, js.hasMark = mark{step: step, epoch: epoch}, true // the latest notice's epoch is the live run
	}
	js.seen = now
	for c := range t.inflight[key] {
		if js.decided.covers(c.step, c.epoch) {
			c.cancel()
		}
	}
	t.sweep(now)
	return true, hi
}

// sweep forgets jobs without news for trackerTTL, at most once a minute.
// t.mu is held.
func (t *tracker) sweep(now time.Time) {
	if now.Sub(t.lastSweep) <= time.Minute {
		return
	}
	t.lastSweep = now
	for k, js := range t.jobs {
		if now.Sub(js.seen) > trackerTTL {
			delete(t.jobs, k)
		}
	}
}

// register records a call in flight, so a notice deciding its step cancels
// it; the returned func forgets it.
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
	if js := t.jobs[key]; js != nil && js.hasMark && js.decided.covers(step, epoch) {
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
