package llm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Retry policy, by what one attempt saw:
//
//	attempt outcome                         action
//	2xx with a decodable body, >= 1 choice  success
//	2xx, body undecodable, no choices or    retry (backoff); after BadResponseAttempts
//	usage out of range                      of them ErrBadResponse
//	per-attempt timeout                     retry (backoff); cause ErrAttemptTimeout
//	network error (refused, reset, EOF)     retry (backoff)
//	TLS certificate verification failure    ErrPermanent
//	408, 409, 5xx                           retry (Retry-After if given, else backoff)
//	429 rate limit                          retry (Retry-After if given, else backoff)
//	429 insufficient_quota/billing, 402,    ErrQuota + ErrRetryLater, no retry
//	other 4xx with a quota code/type
//	Retry-After > MaxRetryAfter             ErrRetryLater with Delay, no retry
//	401, 403, 404 (key or model refused)     ErrProvider (also ErrPermanent), no retry
//	other 4xx (400, 422...)                 ErrPermanent, no retry
//	invalid Request, go-openai refusal      ErrPermanent, nothing sent
//	caller's ctx done (also mid-wait)       ctx.Err() wrapped, no retry
//	MaxAttempts retryable failures          ErrRetryBudget wrapping the last cause

type outcome int

const (
	success outcome = iota
	retryable
	permanent
	provider // 401, 403, 404: the key or the model is refused
	quota
	badResponse // a 2xx reply that cannot be used: retried a few times only
	stopped     // the caller's ctx ended
)

type verdict struct {
	outcome    outcome
	err        error
	retryAfter time.Duration
	hasRA      bool
}

// retry runs call up to maxAttempts times and returns the attempts made.
func (c *Client) retry(ctx context.Context, op string, maxAttempts int,
	call func(context.Context, *attemptState) error,
) (int, error) {
	var last error
	// A reply that cannot be used is retried, but not MaxAttempts times
	// over every delivery: the same request tends to get the same reply.
	badLimit, bad := min(c.cfg.BadResponseAttempts, maxAttempts), 0
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return attempt - 1, stopErr(c.where(op, attempt-1, maxAttempts), err, last)
		}
		v := c.attempt(ctx, call)
		if v.outcome == success {
			return attempt, nil
		}
		where := c.where(op, attempt, maxAttempts)
		switch v.outcome {
		case stopped:
			return attempt, stopErr(where, ctx.Err(), v.err)
		case permanent:
			return attempt, fmt.Errorf("%w: %s: %w", ErrPermanent, where, v.err)
		case provider:
			return attempt, fmt.Errorf("%w (%w): %s: %w", ErrProvider, ErrPermanent, where, v.err)
		case quota:
			d := c.cfg.MaxRetryAfter
			if v.hasRA {
				d = v.retryAfter
			}
			return attempt, &RetryLaterError{Delay: d, Quota: true, Cause: fmt.Errorf("%s: %w", where, v.err)}
		case badResponse:
			if bad++; bad >= badLimit {
				return attempt, fmt.Errorf("%w: %s: %d unusable replies: %w", ErrBadResponse, where, bad, v.err)
			}
		}
		last = v.err
		if v.hasRA && v.retryAfter > c.cfg.MaxRetryAfter {
			// Holding a worker for minutes helps nobody: let the caller reschedule.
			return attempt, &RetryLaterError{Delay: v.retryAfter, Cause: fmt.Errorf("%s: %w", where, v.err)}
		}
		if attempt >= maxAttempts {
			return attempt, fmt.Errorf("%w: %s: %w", ErrRetryBudget, where, v.err)
		}
		d := c.delay(attempt, v)
		if c.cfg.OnRetry != nil {
			c.cfg.OnRetry(RetryEvent{Attempt: attempt, Delay: d, Err: v.err})
		}
		if err := c.cfg.Sleep(ctx, d); err != nil {
			return attempt, stopErr(where, err, last)
		}
	}
}

func (c *Client) where(op string, attempt, maxAttempts int) string {
	return fmt.Sprintf("%s (model %s, attempt %d/%d)", op, c.cfg.Model, attempt, maxAttempts)
}

func stopErr(where string, err, last error) error {
	if last == nil {
		return fmt.Errorf("llm: %s: %w", where, err)
	}
	return fmt.Errorf("llm: %s: %w (last error: %v)", where, err, last)
}

// attempt makes one HTTP attempt under its own timeout and judges it.
func (c *Client) attempt(ctx context.Context, call func(context.Context, *attemptState) error) verdict {
	actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	st := &attemptState{}
	err := call(context.WithValue(actx, stateKey{}, st), st)
	switch {
	case err == nil:
		return verdict{outcome: success}
	case ctx.Err() != nil:
		// Checked before the attempt timeout: the caller's ctx wins.
		return verdict{outcome: stopped, err: err}
	case actx.Err() != nil:
		// %v, not %w: context.DeadlineExceeded in the chain would read as
		// "the caller's deadline passed".
		return verdict{outcome: retryable, err: fmt.Errorf("%w after %s: %v", ErrAttemptTimeout, c.cfg.AttemptTimeout, err)}
	}
	return c.classify(st, err)
}

// classify judges a failed attempt that was not a timeout or cancellation.
func (c *Client) classify(st *attemptState, err error) verdict {
	switch {
	case !st.called || st.localErr != nil:
		// Refused before sending (request validation in go-openai, body
		// rewrite): the same request will be refused again.
		return verdict{outcome: permanent, err: err}
	case st.status == 0:
		if isCertError(err) {
			return verdict{outcome: permanent, err: err}
		}
		return verdict{outcome: retryable, err: err}
	}
	if HTTPStatus(err) == 0 {
		err = &httpError{status: st.status, err: err}
	}
	v := verdict{err: err}
	v.retryAfter, v.hasRA = parseRetryAfter(st.retryAfterMS, st.retryAfter, c.cfg.Now())
	switch s := st.status; {
	case s >= 200 && s < 300:
		v.outcome, v.hasRA = badResponse, false
		v.err = fmt.Errorf("bad response: %w", err)
	case s == 402: // OpenRouter and others: out of credit
		v.outcome = quota
	case s == 429:
		v.outcome = retryable
		if byCode, byText := quotaSignals(err); byCode || byText {
			v.outcome = quota
		}
	case s == 408, s == 409, s >= 500:
		v.outcome = retryable
	case s == 401, s == 403, s == 404:
		// The key or the model is refused: the deployment's configuration,
		// whatever the request.
		v.outcome = provider
		// Some proxies (LiteLLM budgets) report spend limits as 403.
		if byCode, _ := quotaSignals(err); byCode {
			v.outcome = quota
		}
	default:
		v.outcome = permanent
		// Some proxies (LiteLLM budgets) report spend limits as 400.
		if byCode, _ := quotaSignals(err); byCode {
			v.outcome = quota
		}
	}
	return v
}

// delay is the wait after the failed-th failed attempt: the server's
// Retry-After if given (but at least a small jitter so a 0 does not spin),
// else full jitter over an exponentially growing, capped ceiling.
func (c *Client) delay(failed int, v verdict) time.Duration {
	if v.hasRA {
		return max(v.retryAfter, c.jitter(c.cfg.BackoffBase))
	}
	ceil := c.cfg.BackoffBase
	for i := 1; i < failed && ceil < c.cfg.BackoffMax; i++ {
		if ceil > c.cfg.BackoffMax/2 {
			ceil = c.cfg.BackoffMax
			break
		}
		ceil *= 2
	}
	return c.jitter(min(ceil, c.cfg.BackoffMax))
}

func (c *Client) jitter(ceil time.Duration) time.Duration {
	f := c.cfg.Rand() * float64(ceil)
	if f >= float64(maxDelay) { // float64(MaxInt64) rounds up: converting it overflows
		return maxDelay
	}
	return time.Duration(f)
}

func isCertError(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		hn x509.HostnameError
		ci x509.CertificateInvalidError
	)
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci)
}

// Codes and types servers use for "out of money", as opposed to "too fast".
var quotaCodes = map[string]bool{
	"insufficient_quota":         true,
	"billing_hard_limit_reached": true,
	"billing_not_active":         true,
	"quota_exceeded":             true,
	"insufficient_credits":       true,
	"spend_limit_exceeded":       true,
	"budget_exceeded":            true,
}

// Codes that say "too fast": these win over quota-sounding messages.
var rateLimitCodes = map[string]bool{
	"rate_limit_exceeded": true,
	"requests":            true,
	"tokens":              true,
}

var quotaPhrases = []string{
	"insufficient_quota", "exceeded your current quota", "billing",
	"spend limit", "spending limit", "insufficient credit", "budget",
}

// quotaSignals reports whether err says "out of quota/credit/budget" rather
// than "too fast": byCode from the error's code or type, byText from its
// message or raw body (only when the code is not a known rate-limit code).
func quotaSignals(err error) (byCode, byText bool) {
	var ae *openai.APIError
	if errors.As(err, &ae) {
		code := ""
		switch v := ae.Code.(type) {
		case string:
			code = v
		case int:
			code = strconv.Itoa(v)
		}
		code, typ := strings.ToLower(code), strings.ToLower(ae.Type)
		switch {
		case quotaCodes[code] || quotaCodes[typ]:
			return true, false
		case rateLimitCodes[code] || rateLimitCodes[typ]:
			return false, false
		}
		return false, containsAny(strings.ToLower(ae.Message), quotaPhrases)
	}
	var re *openai.RequestError
	if errors.As(err, &re) {
		return false, containsAny(strings.ToLower(string(re.Body)), quotaPhrases)
	}
	return false, false
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
