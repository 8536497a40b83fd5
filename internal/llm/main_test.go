package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the fixed clock for Retry-After HTTP-dates.
var t0 = time.Date(2025, 11, 12, 10, 0, 0, 0, time.UTC)

// reply is one scripted server response.
type reply struct {
	status int
	header map[string]string
	body   string
	hang   bool // block until the request's context ends
	cut    bool // write the body, then break the connection
}

func okReply(content string) reply {
	return reply{status: 200, body: okBody(content)}
}

func okBody(content string) string {
	c, _ := json.Marshal(content)
	return `{"id":"c1","object":"chat.completion","model":"served-model","choices":[` +
		`{"index":0,"message":{"role":"assistant","content":` + string(c) + `},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`
}

// usageBody is a good reply that reports the given usage figures.
func usageBody(prompt, completion int) string {
	return fmt.Sprintf(`{"id":"c1","object":"chat.completion","model":"served-model","choices":[`+
		`{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, prompt, completion, prompt+completion)
}

func errReply(status int, code, typ, msg string) reply {
	return reply{status: status, body: fmt.Sprintf(
		`{"error":{"message":%q,"type":%q,"code":%q,"param":null}}`, msg, typ, code)}
}

func withHeader(r reply, kv ...string) reply {
	r.header = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		r.header[kv[i]] = kv[i+1]
	}
	return r
}

// seen is one request as the server received it.
type seen struct {
	method, path  string
	raw           []byte
	header        http.Header
	contentLength int64
}

// fake is a scripted OpenAI-compatible server: replies are served in order
// and the last one repeats.
type fake struct {
	srv     *httptest.Server
	mu      sync.Mutex
	replies []reply
	reqs    []seen
	hit     chan struct{} // if set, gets a value per request (non-blocking)
}

func newFake(t *testing.T, replies ...reply) *fake {
	t.Helper()
	f := &fake{replies: replies}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	rep := f.replies[min(len(f.reqs), len(f.replies)-1)]
	f.reqs = append(f.reqs, seen{r.Method, r.URL.Path, raw, r.Header.Clone(), r.ContentLength})
	ch := f.hit
	f.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	if rep.hang {
		<-r.Context().Done()
		return
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
	if rep.cut {
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // net/http closes the connection mid-body
	}
}

func (f *fake) hits() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

func (f *fake) last() seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs[len(f.reqs)-1]
}

// sleeps records the waits the client asked for, without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// testClient: 4 attempts, 100ms base, jitter fixed at half the ceiling,
// no real sleeping, clock fixed at t0.
func testClient(t *testing.T, baseURL string, mut func(*Config)) (*Client, *sleeps) {
	t.Helper()
	s := &sleeps{}
	cfg := Config{
		BaseURL:     baseURL + "/v1",
		Model:       "test-model",
		MaxAttempts: 4,
		BackoffBase: 100 * time.Millisecond,
		BackoffMax:  time.Second,
		Sleep:       s.sleep,
		Rand:        func() float64 { return 0.5 },
		Now:         func() time.Time { return t0 },
	}
	if mut != nil {
		mut(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.Close)
	return c, s
}

var hello = Request{Messages: []Message{{Role: "user", Content: "hello"}}}
