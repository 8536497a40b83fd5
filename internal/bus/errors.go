package bus

import "errors"

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
