package simllm_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/simllm"
)

// fakeClock is a settable clock for the limits.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func limitedServer(t *testing.T, rpm, tpm int64) (*httptest.Server, *simllm.Server, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	s, err := simllm.New(simllm.Config{RPM: rpm, TPM: tpm, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, s, clk
}

func call(t *testing.T, url string, maxTokens int) *http.Response {
	t.Helper()
	body := `{"model":"sim-1","messages":[{"role":"user","content":"Say hi."}],"max_tokens":` + strconv.Itoa(maxTokens) + `}`
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp
}

func TestLimitsRequests(t *testing.T) {
	t.Parallel()
	// 120 rpm: a bucket of 2 requests refilled at 2 a second.
	ts, s, clk := limitedServer(t, 120, 0)
	for i := range 2 {
		r := call(t, ts.URL, 8)
		if r.StatusCode != 200 {
			t.Fatalf("call %d: %d", i, r.StatusCode)
		}
		if got := r.Header.Get("X-Ratelimit-Limit-Requests"); got != "120" {
			t.Errorf("x-ratelimit-limit-requests %q, want 120", got)
		}
		if got, want := r.Header.Get("X-Ratelimit-Remaining-Requests"), strconv.Itoa(1-i); got != want {
			t.Errorf("call %d: x-ratelimit-remaining-requests %q, want %s", i, got, want)
		}
	}
	r := call(t, ts.URL, 8)
	if r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third call at once: %d, want 429", r.StatusCode)
	}
	if got := r.Header.Get("Retry-After-Ms"); got != "500" {
		t.Errorf("retry-after-ms %q, want 500 (one request at 2/s)", got)
	}
	if got := r.Header.Get("X-Ratelimit-Reset-Requests"); got != "500ms" {
		t.Errorf("x-ratelimit-reset-requests %q, want 500ms", got)
	}
	clk.add(500 * time.Millisecond)
	if r := call(t, ts.URL, 8); r.StatusCode != 200 {
		t.Fatalf("after the wait: %d", r.StatusCode)
	}
	if st := s.Stats(); st.OverLimit != 1 || st.RateLimited != 1 || st.Completions != 3 {
		t.Errorf("stats %+v, want 1 over the limit of 4 requests", st)
	}
}

func TestLimitsTokens(t *testing.T) {
	t.Parallel()
	// 600 tpm: a bucket of 10 tokens refilled at 10 a second; a call of
	// about 15 tokens is served, then the bucket owes until it refills.
	ts, s, clk := limitedServer(t, 0, 600)
	if r := call(t, ts.URL, 8); r.StatusCode != 200 {
		t.Fatalf("first call: %d", r.StatusCode)
	}
	st := s.Stats()
	used := st.PromptTokens + st.CompletionTokens
	r := call(t, ts.URL, 8)
	if r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second call after %d tokens: %d, want 429", used, r.StatusCode)
	}
	if r.Header.Get("X-Ratelimit-Remaining-Tokens") != "0" {
		t.Errorf("x-ratelimit-remaining-tokens %q, want 0", r.Header.Get("X-Ratelimit-Remaining-Tokens"))
	}
	clk.add(time.Duration(used-10+1) * 100 * time.Millisecond)
	if r := call(t, ts.URL, 8); r.StatusCode != 200 {
		t.Fatalf("after the refill: %d", r.StatusCode)
	}
}

func TestLimitsOffByDefault(t *testing.T) {
	t.Parallel()
	ts, _, _ := limitedServer(t, 0, 0)
	for range 50 {
		r := call(t, ts.URL, 8)
		if r.StatusCode != 200 || r.Header.Get("X-Ratelimit-Limit-Requests") != "" {
			t.Fatalf("unlimited server: %d, headers %v", r.StatusCode, r.Header)
		}
	}
	if _, err := simllm.New(simllm.Config{RPM: -1}); err == nil {
		t.Error("negative RPM accepted")
	}
}
