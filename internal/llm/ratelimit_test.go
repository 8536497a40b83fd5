package llm_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
)

func TestProviderHold(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		status int
		h      map[string]string
		want   time.Duration
		ok     bool
	}{
		{"plain 200", 200, nil, 0, false},
		{"requests left", 200, map[string]string{"x-ratelimit-remaining-requests": "12", "x-ratelimit-reset-requests": "3s"}, 0, false},
		{"no request left", 200, map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s"}, 1500 * time.Millisecond, true},
		{"no token left, longest reset wins", 200, map[string]string{
			"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "200ms",
			"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6m0s"}, 6 * time.Minute, true},
		{"reset in seconds", 200, map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "2"}, 2 * time.Second, true},
		{"unreadable reset", 200, map[string]string{"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "soon"}, 0, false},
		{"429 retry-after-ms", 429, map[string]string{"retry-after-ms": "750", "retry-after": "1"}, 750 * time.Millisecond, true},
		{"429 retry-after", 429, map[string]string{"retry-after": "3"}, 3 * time.Second, true},
		{"429 bare", 429, nil, time.Second, true},
		{"429 with reset", 429, map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "4s"}, 4 * time.Second, true},
		{"absurd hold capped", 429, map[string]string{"retry-after": "999999"}, 10 * time.Minute, true},
	} {
		h := http.Header{}
		for k, v := range tc.h {
			h.Set(k, v)
		}
		got, ok := llm.ProviderHold(tc.status, h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: ProviderHold = %s, %v; want %s, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
