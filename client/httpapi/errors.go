package httpapi

import (
	"fmt"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/client/apierr"
	"github.com/makerfleet/makerfleet/schemas"
)

// Sentinel errors: package apierr's, the vocabulary both clients share
// (httpapi.ErrNotFound == client.ErrNotFound), matched by a *ProblemError
// of their kind (errors.Is): 401 ErrUnauthorized, 403 ErrForbidden, 404
// ErrNotFound, 409 ErrConflict (and ErrNotFinished, ErrFinished or
// ErrNotWaiting, the problem's State saying where a job stands), 400, 415
// and 422 ErrInvalid (the problem's Errors name the failing fields; 422
// over-budget also ErrOverBudget), 413 ErrTooLarge and ErrInvalid, 429
// ErrRateLimited (RetryAfter says when to try again), 5xx ErrUnavailable.
var (
	ErrUnauthorized = apierr.ErrUnauthorized
	ErrForbidden    = apierr.ErrForbidden
	ErrNotFound     = apierr.ErrNotFound
	ErrConflict     = apierr.ErrConflict
	ErrNotFinished  = apierr.ErrNotFinished
	ErrFinished     = apierr.ErrFinished
	ErrNotWaiting   = apierr.ErrNotWaiting
	ErrInvalid      = apierr.ErrInvalid
	ErrOverBudget   = apierr.ErrOverBudget
	ErrTooLarge     = apierr.ErrTooLarge
	ErrRateLimited  = apierr.ErrRateLimited
	ErrUnavailable  = apierr.ErrUnavailable
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
	"too-large":              {ErrTooLarge, ErrInvalid},
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
