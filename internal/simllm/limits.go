package simllm

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// limits enforce Config.RPM and Config.TPM like a provider's key: each is a
// bucket that refills continuously at its limit per minute and holds one
// second's worth (at least one request). A call is refused with 429 when
// the request bucket holds less than one request or the token bucket is
// empty; an answered call then takes its prompt and completion tokens
// from the token bucket (which may go below zero: a large call is
// served, and the next wait for it). Every chat reply carries the
// x-ratelimit-* headers OpenAI sends.
type limits struct {
	mu         sync.Mutex
	now        func() time.Time
	req, tok   bucket
	rpm, tpm   int64
	configured bool
}

// bucket is one limit's level.
type bucket struct {
	level, capacity, perSec float64
	at                      time.Time
}

func (b *bucket) refill(now time.Time) {
	if b.perSec == 0 {
		return
	}
	b.level = math.Min(b.capacity, b.level+now.Sub(b.at).Seconds()*b.perSec)
	b.at = now
}

// until is how long until the level reaches want.
func (b *bucket) until(want float64) time.Duration {
	if b.level >= want || b.perSec == 0 {
		return 0
	}
	return time.Duration((want - b.level) / b.perSec * float64(time.Second))
}

func newLimits(rpm, tpm int64, now func() time.Time) *limits {
	l := &limits{now: now, rpm: rpm, tpm: tpm, configured: rpm > 0 || tpm > 0}
	t := now()
	if rpm > 0 {
		ps := float64(rpm) / 60
		l.req = bucket{level: math.Max(1, ps), capacity: math.Max(1, ps), perSec: ps, at: t}
	}
	if tpm > 0 {
		ps := float64(tpm) / 60
		l.tok = bucket{level: ps, capacity: ps, perSec: ps, at: t}
	}
	return l
}

// admit takes one request if both buckets allow it; else it returns the
// wait until they would (for Retry-After) and which limit refused.
func (l *limits) admit() (wait time.Duration, which string, ok bool) {
	if !l.configured {
		return 0, "", true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.req.refill(now)
	l.tok.refill(now)
	if l.rpm > 0 && l.req.level < 1 {
		return l.req.until(1), "requests", false
	}
	if l.tpm > 0 && l.tok.level <= 0 {
		return max(l.tok.until(1), time.Millisecond), "tokens", false
	}
	if l.rpm > 0 {
		l.req.level--
	}
	return 0, "", true
}

// charge takes an answered call's tokens.
func (l *limits) charge(tokens int) {
	if l.tpm <= 0 {
		return
	}
	l.mu.Lock()
	l.tok.refill(l.now())
	l.tok.level -= float64(tokens)
	l.mu.Unlock()
}

// headers writes the x-ratelimit-* headers of the limits now.
func (l *limits) headers(h http.Header) {
	if !l.configured {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for _, b := range []struct {
		kind  string
		limit int64
		b     *bucket
	}{{"requests", l.rpm, &l.req}, {"tokens", l.tpm, &l.tok}} {
		if b.limit <= 0 {
			continue
		}
		b.b.refill(now)
		// Remaining is what may be taken now; reset is how long until
		// one more request (token) fits: a client that holds off for it
		// when nothing remains is never refused.
		rem := int64(math.Max(0, math.Floor(b.b.level)))
		h["X-Ratelimit-Limit-"+capital(b.kind)] = []string{strconv.FormatInt(b.limit, 10)}
		h["X-Ratelimit-Remaining-"+capital(b.kind)] = []string{strconv.FormatInt(rem, 10)}
		h["X-Ratelimit-Reset-"+capital(b.kind)] = []string{b.b.until(1).Round(time.Millisecond).String()}
	}
}

func capital(s string) string {
	if s == "requests" {
		return "Requests"
	}
	return "Tokens"
}
