// Package throttle spaces out the log lines of events a client can repeat
// at will (a forged notice, a refused request, a record that lies about
// its owner): each is counted in full where it happens, and logged at most
// once per interval, so a flood cannot drown the log.
package throttle

import (
	"sync/atomic"
	"time"
)

// Every lets one event through per Interval. The zero Every lets every
// event through; it is safe for concurrent use.
type Every struct {
	// Interval is the least time between two events let through.
	Interval time.Duration
	last     atomic.Int64 // UnixNano of the last event let through; 0: none yet
}

// Allow reports whether an event happening now is let through: the first
// one, then one at least Interval after the last let through.
func (e *Every) Allow() bool {
	now := time.Now().UnixNano()
	last := e.last.Load()
	if last != 0 && now-last < int64(e.Interval) {
		return false
	}
	return e.last.CompareAndSwap(last, now)
}
