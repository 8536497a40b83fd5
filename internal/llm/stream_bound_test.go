package llm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A stream whose server ignores include_usage gets estimated usage
// (bytes / 4), marked, instead of 0 tokens that budgets and cost metrics
// would take for free.
func TestStreamNoUsageEstimated(t *testing.T) {
	t.Parallel()
	answer := strings.Repeat("abcd", 25) // 100 bytes: 25 tokens
	for _, tc := range []struct {
		name          string
		body          string
		want          [2]int
		wantEstimated bool
	}{
		{"no usage", sse(true, chunk(0, roleDelta, ""), chunk(0, content(answer), "stop")), [2]int{10, 25}, true},
		{"usage", sse(true, chunk(0, content(answer), "stop"), usageChunk), [2]int{11, 7}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, reply{status: 200, body: tc.body})
			c, _ := testClient(t, f.srv.URL, func(cfg *Config) { cfg.Stream = true })
			req := Request{Messages: []Message{{Role: "system", Content: strings.Repeat("s", 20)}, {Role: "user", Content: strings.Repeat("u", 20)}}}
			res, err := c.Complete(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if got := [2]int{res.PromptTokens, res.CompletionTokens}; got != tc.want || res.UsageEstimated != tc.wantEstimated {
				t.Errorf("usage %v estimated %v, want %v estimated %v", got, res.UsageEstimated, tc.want, tc.wantEstimated)
			}
		})
	}
}

// endless serves a 200 that never ends, as fast as the client reads, and
// counts the bytes it got out.
type endless struct {
	srv     *httptest.Server
	written atomic.Int64
}

func newEndless(t *testing.T, head, unit string) *endless {
	t.Helper()
	e := &endless{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		n, err := w.Write([]byte(head))
		e.written.Add(int64(n))
		for err == nil && r.Context().Err() == nil {
			n, err = w.Write([]byte(unit))
			e.written.Add(int64(n))
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// A reply that never ends (a looping or hostile server), streamed or not,
// ends its attempt as a bad response once past maxReplyBytes: the call
// fails quickly with ErrBadResponse and reads a bounded amount.
func TestReplyBounded(t *testing.T) {
	t.Parallel()
	const maxTokens = 100 // bound: max(1 MiB, 16 × 4 × 100 B) = 1 MiB
	delta := chunk(0, content(strings.Repeat("loop ", 200)), "")
	for _, tc := range []struct {
		name       string
		stream     bool
		head, unit string
	}{
		{"stream of chunks", true, "", "data: " + delta + "\n\n"},
		{"stream, one endless line", true, "data: ", strings.Repeat("a", 4096)},
		{"plain reply", false, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`, strings.Repeat("a", 4096)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEndless(t, tc.head, tc.unit)
			c, _ := testClient(t, e.srv.URL, func(cfg *Config) { cfg.Stream = tc.stream })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req := hello
			req.MaxTokens = maxTokens
			start := time.Now()
			res, err := c.Complete(ctx, req)
			if !errors.Is(err, ErrBadResponse) || !errors.Is(err, errReplyTooLarge) {
				t.Fatalf("error %v, want %v for %v", err, ErrBadResponse, errReplyTooLarge)
			}
			if res.Attempts != DefaultBadResponseAttempts {
				t.Errorf("%d attempts, want %d", res.Attempts, DefaultBadResponseAttempts)
			}
			// What the server got out: each attempt's bound, plus what the
			// connection buffers held when the client hung up.
			if w, most := e.written.Load(), int64(DefaultBadResponseAttempts)*(maxReplyBytes(maxTokens, 1)+16<<20); w > most {
				t.Errorf("server wrote %d bytes, want at most %d", w, most)
			}
			t.Logf("ended after %s, the server wrote %d bytes", time.Since(start), e.written.Load())
		})
	}
	if got := maxReplyBytes(0, 1); got != 1<<20 {
		t.Errorf("maxReplyBytes(0, 1) = %d, want 1 MiB", got)
	}
	if got := maxReplyBytes(32768, 1); got != 16*4*32768 {
		t.Errorf("maxReplyBytes(32768, 1) = %d, want %d", got, 16*4*32768)
	}
}
