package client

import (
	"errors"

	"github.com/makerfleet/makerfleet/client/apierr"
	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// Sentinel errors: package apierr's, the vocabulary both clients share.
// An error a Client returns matches (errors.Is) at most one of them; its
// message is the fleet's own, naming the job and why.
var (
	ErrInvalid     = apierr.ErrInvalid
	ErrNotFound    = apierr.ErrNotFound
	ErrConflict    = apierr.ErrConflict
	ErrNotFinished = apierr.ErrNotFinished
	ErrFinished    = apierr.ErrFinished
	ErrNotWaiting  = apierr.ErrNotWaiting
	ErrUnavailable = apierr.ErrUnavailable
	ErrNoFleet     = apierr.ErrNoFleet
	ErrClosed      = apierr.ErrClosed
	ErrTooMany     = apierr.ErrTooMany
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
