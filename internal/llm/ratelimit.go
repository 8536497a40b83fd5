package llm

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ProviderHold reads what a provider's reply says about its rate limits:
// how long no call should be sent to it. A 429 holds for its
// retry-after-ms or Retry-After (else its x-ratelimit-reset-* time, else
// a second); any reply whose x-ratelimit-remaining-requests or
// x-ratelimit-remaining-tokens is 0 holds until that limit's
// x-ratelimit-reset-requests or -tokens ("1s", "6m0s", "250ms" as OpenAI
// writes them, or seconds). ok is false when the reply asks for no hold.
func ProviderHold(status int, h http.Header, now time.Time) (d time.Duration, ok bool) {
	for _, kind := range []string{"requests", "tokens"} {
		rem := strings.TrimSpace(h.Get("X-Ratelimit-Remaining-" + kind))
		if rem == "" {
			continue
		}
		if n, err := strconv.ParseFloat(rem, 64); err != nil || n > 0 {
			continue
		}
		if r, rok := parseReset(h.Get("X-Ratelimit-Reset-" + kind)); rok && r > d {
			d, ok = r, true
		}
	}
	if status == http.StatusTooManyRequests {
		if ra, rok := parseRetryAfter(h.Get("Retry-After-Ms"), h.Get("Retry-After"), now); rok {
			return min(max(ra, d), maxProviderHold), true
		}
		if !ok {
			d = time.Second
		}
		ok = true
	}
	return min(d, maxProviderHold), ok
}

// maxProviderHold bounds a hold a reply may ask for: a broken or hostile
// server cannot park a deployment for days (its breaker takes it out
// instead if it keeps refusing).
const maxProviderHold = 10 * time.Minute

// parseReset reads an x-ratelimit-reset-* value: a Go-style duration
// ("6m0s", "1.5s", "250ms") or a number of seconds.
func parseReset(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, true
	}
	return parseDelay(s, float64(time.Second))
}
