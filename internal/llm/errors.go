package llm

import (
	"errors"
	"fmt"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Sentinels for errors.Is. Every error from Complete falls in one row below
// and also wraps its underlying cause, so callers can decide a message's fate:
//
//	error                       cause                                 voter does
//	ErrProvider (+ErrPermanent) 401, 403, 404: the key or the model   hand back; not ready; back off
//	                            is refused (the fleet's configuration)
//	ErrPermanent                other 4xx except 402/408/409/429,     answer red flag "refused"
//	                            bad request, TLS verification
//	ErrQuota (+ErrRetryLater)   429 insufficient_quota/billing, 402,  NakWithDelay(Delay); pause the job
//	                            4xx with a quota/budget error code
//	ErrRetryLater               Retry-After above MaxRetryAfter       NakWithDelay(Delay)
//	ErrRetryBudget              MaxAttempts retryable failures        Nak with backoff
//	ErrBadResponse              BadResponseAttempts 2xx replies that  answer with red flag "empty"
//	                            cannot be used (not JSON, no choice,
//	                            usage out of range, a body past
//	                            maxReplyBytes)
//	context.Canceled/...        the caller's ctx ended                stop; nothing to report
var (
	// ErrRetryBudget: every attempt failed with a retryable error. The last
	// cause is wrapped too.
	ErrRetryBudget = errors.New("llm: retry budget exhausted")
	// ErrRetryLater: the server asked for a wait longer than MaxRetryAfter,
	// or a quota/spend limit was hit. The error is a *RetryLaterError.
	ErrRetryLater = errors.New("llm: retry later")
	// ErrPermanent: retrying the same request cannot help.
	ErrPermanent = errors.New("llm: permanent failure")
	// ErrProvider: the provider refuses this client's key or model (401,
	// 403, 404 such as model_not_found). It is the deployment's
	// configuration, not the request: another voter, or this one once
	// fixed, serves the same request. It also matches ErrPermanent (no
	// retry in the call).
	ErrProvider = errors.New("llm: the provider refuses the key or the model")
	// ErrQuota: out of quota, credit or spend limit. Not retried in-call,
	// but it also matches ErrRetryLater: topping up fixes it, so a run
	// should pause and resume, not fail.
	ErrQuota = errors.New("llm: quota or spend limit reached")
	// ErrBadResponse: the server kept answering 2xx with a reply that
	// cannot be used: a body that is not a chat completion, no choice, or
	// usage figures out of range (negative, or beyond MaxUsageTokens). A
	// server that does so for one request is likely to do so again (the
	// same prompt, seed and temperature), so the call ends after
	// BadResponseAttempts such replies rather than being retried for ever.
	// The last reply's fault is wrapped too.
	ErrBadResponse = errors.New("llm: unusable response")
	// ErrAttemptTimeout: one attempt ran past AttemptTimeout. Retried; seen
	// as the cause inside ErrRetryBudget and in RetryEvent.Err.
	ErrAttemptTimeout = errors.New("llm: attempt timed out")
)

// RetryLaterError is returned for ErrRetryLater and ErrQuota.
type RetryLaterError struct {
	// Delay is the server's requested wait. For a quota error without a
	// Retry-After it is MaxRetryAfter, a hint to back off for a while.
	Delay time.Duration
	// Quota marks a quota/billing/spend-limit error (matches ErrQuota).
	Quota bool
	// Cause is the underlying HTTP error.
	Cause error
}

func (e *RetryLaterError) Error() string {
	what := "retry later"
	if e.Quota {
		what = "quota or spend limit reached"
	}
	return fmt.Sprintf("llm: %s (after %s): %v", what, e.Delay, e.Cause)
}

func (e *RetryLaterError) Unwrap() error { return e.Cause }

// Is makes a *RetryLaterError match ErrRetryLater, and ErrQuota when Quota.
func (e *RetryLaterError) Is(target error) bool {
	return target == ErrRetryLater || (e.Quota && target == ErrQuota)
}

// httpError keeps the status of a response go-openai could not turn into an
// APIError (for example when reading its body failed).
type httpError struct {
	status int
	err    error
}

func (e *httpError) Error() string { return fmt.Sprintf("http status %d: %v", e.status, e.err) }
func (e *httpError) Unwrap() error { return e.err }

// HTTPStatus returns the HTTP status code carried by err, or 0 when the
// failure happened before a response (network error, timeout, bad request).
func HTTPStatus(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.status
	}
	// RequestError first: it may wrap an APIError whose status is unset.
	var re *openai.RequestError
	if errors.As(err, &re) {
		return re.HTTPStatusCode
	}
	var ae *openai.APIError
	if errors.As(err, &ae) {
		return ae.HTTPStatusCode
	}
	return 0
}
