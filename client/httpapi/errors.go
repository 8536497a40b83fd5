package httpapi

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// Sentinel errors, matched by a *ProblemError of their kind (errors.Is).
var (
	// ErrUnauthorized: the key is missing, unknown or revoked (401).
	ErrUnauthorized = errors.New("httpapi: unauthorized")
	// ErrForbidden: the key may not do this (an admin route, 403).
	ErrForbidden = errors.New("httpapi: forbidden")
	// ErrNotFound: no such job, batch or route in the key's tenant (404).
	ErrNotFound = errors.New("httpapi: not found")
	// ErrConflict: the id is taken by another job, or the request does
	// not fit the job's state (409).
	ErrConflict = errors.New("httpapi: conflict")
	// ErrNotFinished: the job has no report yet (409 not-finished; the
	// problem's State says where it stands).
	ErrNotFinished = errors.New("httpapi: job not finished")
	// ErrFinished: the job (or batch) has ended: it cannot be paused,
	// resumed or cancelled (409 finished).
	ErrFinished = errors.New("httpapi: finished")
	// ErrNotWaiting: a decision for a step not waiting for a person (409
	// not-waiting).
	ErrNotWaiting = errors.New("httpapi: step not waiting for a person")
	// ErrInvalid: the request was refused and nothing was done (400, 415,
	// 422: the problem's Errors name the failing fields).
	ErrInvalid = errors.New("httpapi: invalid request")
	// ErrOverBudget: the job's budget is below the forecast's lowest cost
	// (422 over-budget); it matches ErrInvalid too.
	ErrOverBudget = errors.New("httpapi: budget below the forecast")
	// ErrTooLarge: the request body is over the server's limit (413).
	ErrTooLarge = errors.New("httpapi: request too large")
	// ErrRateLimited: the key's rate limit (429); RetryAfter says when to
	// try again.
	ErrRateLimited = errors.New("httpapi: rate limited")
	// ErrUnavailable: the server or the fleet behind it cannot answer now
	// (500, 501, 502, 503, 504); asking again may succeed.
	ErrUnavailable = errors.New("httpapi: unavailable")
)

// ProblemError is an error answer: the server's problem details.
type ProblemError struct {
	schemas.Problem
	// RetryAfter is the Retry-After header's wait (429), else 0.
	RetryAfter time.Duration
}

// Error is the problem's status, title and detail, and the failing
// fields.
func (e *ProblemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.Status, e.Title)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	for _, f := range e.Errors {
		if f.Message != e.Detail {
			fmt.Fprintf(&b, "; %s: %s", orRoot(f.Path), f.Message)
		}
	}
	return b.String()
}

func orRoot(path string) string {
	if path == "" {
		return "/"
	}
	return path
}

// problemKinds map a problem type (the last part of its URI) to its
// sentinels.
var problemKinds = map[string][]error{
	"unauthorized":           {ErrUnauthorized},
	"forbidden":              {ErrForbidden},
	"not-found":              {ErrNotFound},
	"conflict":               {ErrConflict},
	"not-finished":           {ErrNotFinished, ErrConflict},
	"finished":               {ErrFinished, ErrConflict},
	"not-waiting":            {ErrNotWaiting, ErrConflict},
	"bad-request":            {ErrInvalid},
	"unsupported-media-type": {ErrInvalid},
	"invalid-request":        {ErrInvalid},
	"over-budget":            {ErrOverBudget, ErrInvalid},
	"too-large":              {ErrTooLarge},
	"rate-limited":           {ErrRateLimited},
	"unavailable":            {ErrUnavailable},
	"internal":               {ErrUnavailable},
	"not-implemented":        {ErrUnavailable},
}

// Is matches the sentinels of e's problem type, or, for a type it does
// not know, of its status.
func (e *ProblemError) Is(target error) bool {
	typ := e.Type[strings.LastIndex(e.Type, "/")+1:]
	if kinds, ok := problemKinds[typ]; ok {
		for _, k := range kinds {
			if k == target {
				return true
			}
		}
		return false
	}
	return statusKind(e.Status) == target
}

func statusKind(status int) error {
	switch {
	case status == 401:
		return ErrUnauthorized
	case status == 403:
		return ErrForbidden
	case status == 404:
		return ErrNotFound
	case status == 409:
		return ErrConflict
	case status == 413:
		return ErrTooLarge
	case status == 429:
		return ErrRateLimited
	case status >= 500:
		return ErrUnavailable
	case status >= 400:
		return ErrInvalid
	}
	return nil
}
