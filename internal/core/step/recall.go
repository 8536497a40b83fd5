package step

import (
	"sort"
	"time"
)

// Recognising the answers of decided steps delivered again.
//
// A sample request stored twice (a publish retried, a copy) is answered
// twice. The copy's answers carry their original's result ids only when
// the voter grouped them into messages the same way, which depends on
// when its calls ended; otherwise the results stream keeps them, and
// they reach the job after their step is decided, often several steps
// later. Such an answer, for an index its step counted, is no model call
// the job asked for, so it is not billed. The machine remembers what the
// steps decided within the recall window counted: the results stream's
// duplicate window by default, the time over which the stream itself
// drops an answer sent again under its id.

// DefaultRecallWindow is Config.RecallWindow's default.
const DefaultRecallWindow = 30 * time.Second

// maxRecalled bounds the steps remembered, whatever the window: 65,536
// steps (about 2.6 MB) cover the default window at 2,000 steps a second.
const maxRecalled = 1 << 16

// decided is what a decided step counted.
type decided struct {
	step, epoch int64
	at          int64  // when it was decided (Unix nanoseconds)
	counted     int    // indexes below this were counted
	seen        uint64 // indexes below 64 the tally held, at or above counted
}

// recall is a ring of the steps decided within the window, oldest first,
// in increasing step order (a step decided again, or an earlier one,
// starts it afresh).
type recall struct {
	window time.Duration
	ring   []decided
	head   int // oldest entry
	n      int
}

func newRecall(window time.Duration) recall {
	if window <= 0 {
		window = DefaultRecallWindow
	}
	return recall{window: window}
}

func (r *recall) at(i int) *decided { return &r.ring[(r.head+i)%len(r.ring)] }

// note remembers a step decided at now: counted of its indexes counted,
// seen the others its tally held.
func (r *recall) note(now time.Time, step, epoch int64, counted int, seen map[int]string) {
	d := decided{step: step, epoch: epoch, at: now.UnixNano(), counted: counted}
	for idx := range seen {
		if idx >= counted && idx < 64 {
			d.seen |= 1 << idx
		}
	}
	if r.n > 0 && r.at(r.n-1).step >= step {
		r.head, r.n = 0, 0 // not after the last: the order a lookup needs is broken
	}
	cutoff := d.at - int64(r.window)
	for r.n > 0 && (r.at(0).at < cutoff || r.n == maxRecalled) {
		r.head, r.n = (r.head+1)%len(r.ring), r.n-1
	}
	if r.n == len(r.ring) {
		r.grow()
	}
	*r.at(r.n) = d
	r.n++
}

// grow doubles the ring (up to maxRecalled), the oldest entry first.
func (r *recall) grow() {
	size := min(max(2*len(r.ring), 64), maxRecalled)
	ring := make([]decided, size)
	for i := range r.n {
		ring[i] = *r.at(i)
	}
	r.ring, r.head = ring, 0
}

// counted reports whether a decided step remembered counted (or its tally
// held) index of step at epoch.
func (r *recall) counted(step, epoch int64, index int) bool {
	i := sort.Search(r.n, func(i int) bool { return r.at(i).step >= step })
	if i == r.n {
		return false
	}
	d := r.at(i)
	if d.step != step || d.epoch != epoch || index < 0 {
		return false
	}
	return index < d.counted || (index < 64 && d.seen&(1<<index) != 0)
}
