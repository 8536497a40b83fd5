package bus

import (
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Sentinel errors of the KV helper, the worker and the ordered reader.
var (
	// ErrNotFound: the key is absent (or deleted).
	ErrNotFound = errors.New("bus: key not found")
	// ErrConflict: a write based on a revision found the key changed since
	// (or, creating it, found it present): another writer got in between.
	ErrConflict = errors.New("bus: key changed meanwhile")
	// ErrBadValue: a stored value the codec cannot read.
	ErrBadValue = errors.New("bus: unreadable value")
	// ErrAbort, returned by a KV.Update mutation, ends the update without
	// writing anything and without an error.
	ErrAbort = errors.New("bus: nothing to write")

	// ErrSettled, returned by a Handler, says it acked, nak'd or terminated
	// the message itself: the Worker leaves it alone.
	ErrSettled = errors.New("bus: message settled by its handler")
	// ErrWorker: an invalid WorkerConfig, or a Worker started twice.
	ErrWorker = errors.New("bus: worker")

	// ErrStopRead, returned by a ReadOrdered callback, ends the read early
	// without an error.
	ErrStopRead = errors.New("bus: stop reading")
	// ErrReadStalled: an ordered read found messages pending that did not
	// arrive in time.
	ErrReadStalled = errors.New("bus: ordered read stalled")
)

// jsErrStoreFailed is the server's error code of a message a stream's
// limits refuse (max bytes, max messages per subject with
// discard_new_per_subject): JSStreamStoreFailedF.
const jsErrStoreFailed jetstream.ErrorCode = 10077

// LimitReached reports whether err is a publish the stream's limits
// refused (Limits: a tenant's queue, or the whole stream, is full), as
// opposed to a server that did not answer.
func LimitReached(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.ErrorCode != jsErrStoreFailed {
		return false
	}
	return strings.Contains(api.Description, "maximum")
}
