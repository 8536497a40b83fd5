package throttle_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/throttle"
)

// TestEvery: the first event passes, a burst after it does not, and one
// after the interval passes again; concurrent callers let one through.
func TestEvery(t *testing.T) {
	t.Parallel()
	e := throttle.Every{Interval: time.Hour}
	if !e.Allow() {
		t.Fatal("the first event was held back")
	}
	var passed atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if e.Allow() {
				passed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := passed.Load(); n != 0 {
		t.Errorf("%d of a burst within the interval let through, want 0", n)
	}
	short := throttle.Every{Interval: time.Millisecond}
	short.Allow()
	deadline := time.Now().Add(5 * time.Second)
	for !short.Allow() {
		if time.Now().After(deadline) {
			t.Fatal("no event let through after the interval")
		}
	}
	var zero throttle.Every
	for i := range 2 {
		if !zero.Allow() {
			t.Errorf("the zero Every held event %d back", i+1)
		}
	}
}
