package bus

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// Transient reports whether err means the server did not answer in time
// or not at all (yet), so the same request may succeed later.
func Transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return true
	}
	// A server still bringing JetStream up may fail to create a stream's
	// or a consumer's store, or say it is not available yet.
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jsErrNotAvailable ||
		(apiErr.ErrorCode == jsErrStreamCreate || apiErr.ErrorCode == jsErrConsumerCreate) &&
			strings.HasPrefix(apiErr.Description, "error creating store")
}

// JetStream error codes nats.go has no name for.
const (
	jsErrStreamCreate   jetstream.ErrorCode = 10049 // stream create failed: "{err}"
	jsErrConsumerCreate jetstream.ErrorCode = 10012 // consumer create failed: "{err}"
	jsErrNotAvailable   jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
)
