// Package apierr is the one error vocabulary of makerfleet's Go clients:
// the sentinels that package client (NATS) and package client/httpapi
// (maker serve's HTTP API) both return, so that errors.Is reads the same
// whichever client a program holds. Each client re-exports them under the
// same names (client.ErrNotFound == httpapi.ErrNotFound ==
// apierr.ErrNotFound).
//
// An error matches the sentinel of its kind and keeps the fleet's own
// message. Over HTTP a 409 that is more specific (ErrNotFinished,
// ErrFinished, ErrNotWaiting) matches ErrConflict too, as its status says,
// and ErrOverBudget and ErrTooLarge match ErrInvalid; over NATS an error
// matches one sentinel.
package apierr

import "errors"

// Sentinel errors.
var (
	// ErrInvalid: the request was refused before anything was done (a
	// malformed id, an invalid job spec or batch line, a bad option).
	ErrInvalid = errors.New("makerfleet: invalid request")
	// ErrNotFound: no job (or batch) has this id in this tenant; another
	// tenant's ids are not found either.
	ErrNotFound = errors.New("makerfleet: not found")
	// ErrConflict: the id is taken by a different job (over HTTP also: the
	// request does not fit the job's state).
	ErrConflict = errors.New("makerfleet: conflict")
	// ErrNotFinished: the job has no report yet.
	ErrNotFinished = errors.New("makerfleet: job not finished")
	// ErrFinished: the job (or batch) has ended and can no longer be
	// paused, resumed or cancelled.
	ErrFinished = errors.New("makerfleet: finished")
	// ErrNotWaiting: a person's answer names a step that does not wait
	// for one.
	ErrNotWaiting = errors.New("makerfleet: step not waiting for a person")
	// ErrUnavailable: the fleet (or the server in front of it) could not
	// be asked or read; asking again may succeed.
	ErrUnavailable = errors.New("makerfleet: unavailable")
	// ErrTooMany: the tenant has as many open batches as it may.
	ErrTooMany = errors.New("makerfleet: too many open batches")
	// ErrOverBudget: the job's budget is below the forecast's lowest cost.
	ErrOverBudget = errors.New("makerfleet: budget below the forecast")
	// ErrTooLarge: the request is over the server's size limit.
	ErrTooLarge = errors.New("makerfleet: request too large")
	// ErrUnauthorized: the credentials (an API key) are missing, unknown
	// or revoked.
	ErrUnauthorized = errors.New("makerfleet: unauthorized")
	// ErrForbidden: the credentials may not do this.
	ErrForbidden = errors.New("makerfleet: forbidden")
	// ErrRateLimited: the key's rate limit; try again later.
	ErrRateLimited = errors.New("makerfleet: rate limited")
	// ErrNoFleet: the NATS server holds no fleet (in the client's
	// namespace): no coordinator has run there, nor maker topology create.
	ErrNoFleet = errors.New("makerfleet: no fleet on this server")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("makerfleet: client closed")
)
