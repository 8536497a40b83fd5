package bus

import (
	"context"
	"time"
)

// AttemptTimeout bounds one try of RetryTransient.
const AttemptTimeout = 10 * time.Second

// RetryTransient runs attempt, each try bounded by AttemptTimeout,
// until it succeeds, fails for a reason other than Transient, ctx ends or
// wait has passed, backing off from 100ms to 2s between tries.
func RetryTransient[T any](ctx context.Context, wait time.Duration, attempt func(context.Context) (T, error)) (T, error) {
	deadline := time.Now().Add(wait)
	backoff := 100 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		v, err := attempt(actx)
		cancel()
		if err == nil || !Transient(err) || ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
