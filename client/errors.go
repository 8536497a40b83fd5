package client

import (
	"errors"

	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// Sentinel errors. An error a Client returns matches (errors.Is) at most
// one of them; its message is the fleet's own, naming the job and why.
var (
	// ErrInvalid: the request was refused before anything was sent or
	// changed (a malformed id, an invalid job spec or batch line).
	ErrInvalid = errors.New("client: invalid request")
	// ErrNotFound: no job (or batch) has this id in this tenant.
	ErrNotFound = errors.New("client: not found")
	// ErrConflict: the job id is taken by a different job.
	ErrConflict = errors.New("client: id taken by a different job")
	// ErrNotFinished: the job has no report yet.
	ErrNotFinished = errors.New("client: not finished")
	// ErrFinished: the job has ended and can no longer be paused, resumed
	// or cancelled (or, a job being cancelled, paused or resumed).
	ErrFinished = errors.New("client: finished")
	// ErrNotWaiting: a person's answer names a step that does not wait
	// for one.
	ErrNotWaiting = errors.New("client: step is not waiting for a person")
	// ErrUnavailable: the fleet could not be asked or read; asking again
	// may succeed.
	ErrUnavailable = errors.New("client: fleet unavailable")
	// ErrNoFleet: the NATS server holds no fleet (in the client's
	// namespace): no coordinator has run there, nor `maker topology
	// create`.
	ErrNoFleet = errors.New("client: no fleet on this server")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrTooMany: the tenant has as many open batches as it may; one must
	// end (or be cancelled) first.
	ErrTooMany = errors.New("client: too many open batches")
)

// clientError keeps the fleet's message and adds the client's sentinel.
type clientError struct {
	sentinel, err error
}

func (e *clientError) Error() string   { return e.err.Error() }
func (e *clientError) Unwrap() []error { return []error{e.sentinel, e.err} }

// internalSentinels map the fleet's internal errors to the client's.
var internalSentinels = []struct{ internal, public error }{
	{jobs.ErrInvalid, ErrInvalid},
	{jobs.ErrNotFound, ErrNotFound},
	{jobs.ErrConflict, ErrConflict},
	{jobs.ErrNotFinished, ErrNotFinished},
	{jobs.ErrFinished, ErrFinished},
	{jobs.ErrNotWaiting, ErrNotWaiting},
	{jobs.ErrUnavailable, ErrUnavailable},
	{topology.ErrNoFleet, ErrNoFleet},
	{batch.ErrInvalid, ErrInvalid},
	{batch.ErrNotFound, ErrNotFound},
	{batch.ErrFinished, ErrFinished},
	{batch.ErrUnavailable, ErrUnavailable},
	{batch.ErrTooMany, ErrTooMany},
}

// wrap returns err marked with the client's sentinel for it (err itself
// when none fits, or when it already carries one), its message unchanged.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range internalSentinels {
		if errors.Is(err, s.public) {
			return err
		}
	}
	for _, s := range internalSentinels {
		if errors.Is(err, s.internal) {
			return &clientError{sentinel: s.public, err: err}
		}
	}
	return err
}
