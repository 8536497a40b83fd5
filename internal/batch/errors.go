package batch

import "errors"

// Sentinel errors.
var (
	// ErrInvalid marks a batch refused as a whole (nothing of it runs):
	// a duplicate custom_id, no lines, too many lines, an unreadable input,
	// bad options. The message names the lines.
	ErrInvalid = errors.New("invalid batch")
	// ErrNotFound: no batch of this tenant has this id.
	ErrNotFound = errors.New("unknown batch")
	// ErrFinished: the batch has ended; it cannot be cancelled.
	ErrFinished = errors.New("batch has ended")
	// ErrTooMany: the tenant has CreateOptions.MaxOpen batches open
	// (queued, running or cancelling) already; one must end (or be
	// cancelled) before another is taken.
	ErrTooMany = errors.New("too many open batches")
	// ErrFull: the batch stream every tenant shares is at its size limit
	// (topology.Limits.BatchesBytes): nothing of the batch is kept; asking again
	// once batches have ended may succeed.
	ErrFull = errors.New("the fleet's batch store is full")
	// ErrUnavailable: the fleet could not be read or written; asking again
	// may succeed.
	ErrUnavailable = errors.New("batch store unavailable")
)
