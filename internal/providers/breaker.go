package providers

import (
	"sync"
	"time"
)

// Breaker defaults.
const (
	DefaultCooldown    = 5 * time.Second
	DefaultMaxCooldown = 2 * time.Minute
)

// breaker takes a failing deployment out of a voter's rotation: a failed
// call (the client has already retried it) opens it for a cooldown that
// doubles while it keeps failing; once the cooldown passes, one trial
// call goes through, and its success closes the breaker.
type breaker struct {
	base, ceiling time.Duration

	mu        sync.Mutex
	cooldown  time.Duration
	openUntil time.Time
	trial     bool  // a trial call is in flight
	lastErr   error // the failure that opened it
}

// allow reports whether a call may go now; a call let through while the
// breaker is half open is its trial, and must end in success or failure.
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.lastErr == nil:
		return true
	case now.Before(b.openUntil), b.trial:
		return false
	}
	b.trial = true
	return true
}

// usable reports, without taking a trial, whether allow would let a call
// through now.
func (b *breaker) usable(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastErr == nil || (!now.Before(b.openUntil) && !b.trial)
}

func (b *breaker) success() {
	b.mu.Lock()
	b.cooldown, b.openUntil, b.trial, b.lastErr = 0, time.Time{}, false, nil
	b.mu.Unlock()
}

func (b *breaker) failure(now time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cooldown = min(max(b.base, 2*b.cooldown), b.ceiling)
	b.openUntil, b.trial, b.lastErr = now.Add(b.cooldown), false, err
}

// release ends a call that was neither a success nor the deployment's
// failure (cancelled, or the request's own fault): a trial goes again.
func (b *breaker) release() {
	b.mu.Lock()
	b.trial = false
	b.mu.Unlock()
}

// breakerState is a breaker at one time.
type breakerState struct {
	out   bool      // the deployment is out of rotation
	until time.Time // when its next trial may go
	why   error     // the failure that opened it
}

// state is the breaker now.
func (b *breaker) state(now time.Time) breakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return breakerState{out: b.lastErr != nil && (now.Before(b.openUntil) || b.trial), until: b.openUntil, why: b.lastErr}
}
