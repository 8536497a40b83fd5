package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

func TestNewValidation(t *testing.T) {
	t.Parallel()
	valid := Config{BaseURL: "http://127.0.0.1:8080/v1", Model: "m"}
	tests := []struct {
		name    string
		mut     func(*Config)
		wantErr string // substring; "" means valid
	}{
		{"valid", func(*Config) {}, ""},
		{"trailing slash ok", func(c *Config) { c.BaseURL += "/" }, ""},
		{"missing base url", func(c *Config) { c.BaseURL = "" }, "missing BaseURL"},
		{"no scheme", func(c *Config) { c.BaseURL = "127.0.0.1:8080/v1" }, "BaseURL"},
		{"ftp scheme", func(c *Config) { c.BaseURL = "ftp://host/v1" }, "want http(s)"},
		{"missing model", func(c *Config) { c.Model = " " }, "missing Model"},
		{"negative timeout", func(c *Config) { c.AttemptTimeout = -1 }, "negative AttemptTimeout"},
		{"negative attempts", func(c *Config) { c.MaxAttempts = -1 }, "negative MaxAttempts"},
		{"negative bad-response attempts", func(c *Config) { c.BadResponseAttempts = -1 }, "negative BadResponseAttempts"},
		{"negative retry-after", func(c *Config) { c.MaxRetryAfter = -1 }, "negative MaxRetryAfter"},
		{"max below base", func(c *Config) { c.BackoffBase, c.BackoffMax = time.Second, time.Millisecond }, "below BackoffBase"},
		{"all errors at once", func(c *Config) { c.BaseURL, c.Model = "", "" }, "missing Model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid
			tt.mut(&cfg)
			c, err := New(cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				c.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New err = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := New(Config{BaseURL: "http://x/v1/", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := c.cfg
	if got.AttemptTimeout != 60*time.Second || got.MaxAttempts != 6 || got.BackoffBase != 250*time.Millisecond ||
		got.BackoffMax != 20*time.Second || got.MaxRetryAfter != 60*time.Second || got.BaseURL != "http://x/v1" ||
		got.BadResponseAttempts != 3 {
		t.Errorf("defaults = %+v", got)
	}
	tr, ok := c.hc.Transport.(*http.Transport)
	if !ok || tr.MaxIdleConnsPerHost < 256 {
		t.Errorf("default transport keeps too few idle conns per host: %#v", c.hc.Transport)
	}
}

// TestWireBody checks what reaches the server, byte for byte where it
// matters: temperature 0 must be present, 0.1 must not become a float32.
func TestWireBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  Request
		want map[string]string // field -> raw JSON; "" means absent
	}{
		{"T=0 sent", Request{Temperature: 0},
			map[string]string{"temperature": "0", "n": "1", "seed": "", "max_tokens": ""}},
		{"T=-0 sent as 0", Request{Temperature: math.Copysign(0, -1)}, map[string]string{"temperature": "0"}},
		{"T=0.1 exact", Request{Temperature: 0.1}, map[string]string{"temperature": "0.1"}},
		{"T=0.7 exact", Request{Temperature: 0.7}, map[string]string{"temperature": "0.7"}},
		{"T=1", Request{Temperature: 1}, map[string]string{"temperature": "1"}},
		{"seed, max_tokens, n", Request{Temperature: 0.1, Seed: ptr[int64](42), MaxTokens: 750, N: 3},
			map[string]string{"temperature": "0.1", "seed": "42", "max_tokens": "750", "n": "3"}},
		{"seed 0 sent", Request{Seed: ptr[int64](0)}, map[string]string{"seed": "0"}},
		{"big seed exact", Request{Seed: ptr[int64](1<<53 + 1)}, map[string]string{"seed": "9007199254740993"}},
		{"stream false, model", Request{}, map[string]string{"model": `"test-model"`, "stream": "false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, okReply("ok"))
			c, _ := testClient(t, f.srv.URL, nil)
			tt.req.Messages = []Message{{Role: "system", Content: "rules <&>"}, {Role: "user", Content: "temperature"}}
			if _, err := c.Complete(context.Background(), tt.req); err != nil {
				t.Fatal(err)
			}
			s := f.last()
			if s.method != http.MethodPost || s.path != "/v1/chat/completions" {
				t.Errorf("request %s %s", s.method, s.path)
			}
			if s.contentLength != int64(len(s.raw)) {
				t.Errorf("Content-Length %d, body %d bytes", s.contentLength, len(s.raw))
			}
			var body map[string]json.RawMessage
			if err := json.Unmarshal(s.raw, &body); err != nil {
				t.Fatalf("body not JSON: %v: %s", err, s.raw)
			}
			for k, want := range tt.want {
				got, ok := body[k]
				switch {
				case want == "" && ok:
					t.Errorf("%s = %s, want absent", k, got)
				case want != "" && string(got) != want:
					t.Errorf("%s = %q, want %q (body %s)", k, got, want, s.raw)
				}
			}
			var msgs []Message
			if err := json.Unmarshal(body["messages"], &msgs); err != nil || len(msgs) != 2 ||
				msgs[0] != tt.req.Messages[0] || msgs[1] != tt.req.Messages[1] {
				t.Errorf("messages = %s (%v)", body["messages"], err)
			}
		})
	}
}

func TestAuthorization(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"sk-test", ""} {
		t.Run("key="+key, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, okReply("ok"))
			c, _ := testClient(t, f.srv.URL, func(cfg *Config) { cfg.APIKey = key })
			if _, err := c.Complete(context.Background(), hello); err != nil {
				t.Fatal(err)
			}
			want := ""
			if key != "" {
				want = "Bearer " + key
			}
			if got := f.last().header.Get("Authorization"); got != want {
				t.Errorf("Authorization = %q, want %q", got, want)
			}
		})
	}
}

func TestResponseFields(t *testing.T) {
	t.Parallel()
	f := newFake(t, reply{status: 200, body: `{"model":"served","choices":[` +
		`{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"},` +
		`{"index":1,"message":{"role":"assistant","content":"b"},"finish_reason":"length"}],` +
		`"usage":{"prompt_tokens":600,"completion_tokens":750}}`})
	c, _ := testClient(t, f.srv.URL, nil)
	res, err := c.Complete(context.Background(), Request{Messages: hello.Messages, N: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := []Choice{{"a", "stop"}, {"b", "length"}}
	if !slices.Equal(res.Choices, want) || res.PromptTokens != 600 || res.CompletionTokens != 750 ||
		res.Model != "served" || res.Attempts != 1 || res.Latency <= 0 {
		t.Errorf("response = %+v", res)
	}
}

func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	httpDate := t0.Add(30 * time.Second).Format(http.TimeFormat)
	quotaBody := errReply(429, "insufficient_quota", "insufficient_quota",
		"You exceeded your current quota, please check your plan and billing details.")
	tests := []struct {
		name       string
		replies    []reply
		mut        func(*Config)
		wantErr    []error // all must match; nil means success
		notErr     []error // none may match
		wantHits   int
		wantSleeps []time.Duration
		wantDelay  time.Duration // RetryLaterError.Delay
		wantStatus int           // HTTPStatus(err)
	}{
		{name: "ok first time", replies: []reply{okReply("x")}, wantHits: 1},
		{name: "5xx then ok: exponential full jitter",
			replies: []reply{{status: 500, body: "{}"}, {status: 502, body: "<html>bad gateway</html>"}, okReply("x")},
			// Rand=0.5: ceilings 100ms, 200ms.
			wantHits: 3, wantSleeps: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}},
		{name: "backoff capped by BackoffMax",
			replies:  []reply{{status: 503}},
			mut:      func(c *Config) { c.MaxAttempts, c.BackoffMax = 6, 300*time.Millisecond },
			wantErr:  []error{ErrRetryBudget},
			wantHits: 6, wantStatus: 503,
			wantSleeps: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond,
				150 * time.Millisecond, 150 * time.Millisecond}},
		{name: "429 Retry-After seconds",
			replies:  []reply{withHeader(errReply(429, "rate_limit_exceeded", "requests", "slow down"), "Retry-After", "2"), okReply("x")},
			wantHits: 2, wantSleeps: []time.Duration{2 * time.Second}},
		{name: "429 Retry-After HTTP-date",
			replies:  []reply{withHeader(errReply(429, "", "", "slow down"), "Retry-After", httpDate), okReply("x")},
			wantHits: 2, wantSleeps: []time.Duration{30 * time.Second}},
		{name: "retry-after-ms wins over Retry-After",
			replies:  []reply{withHeader(errReply(429, "", "", "slow"), "Retry-After", "9", "retry-after-ms", "1500"), okReply("x")},
			wantHits: 2, wantSleeps: []time.Duration{1500 * time.Millisecond}},
		{name: "Retry-After 0 still jitters",
			replies:  []reply{withHeader(reply{status: 429}, "Retry-After", "0"), okReply("x")},
			wantHits: 2, wantSleeps: []time.Duration{50 * time.Millisecond}},
		{name: "503 Retry-After honoured",
			replies:  []reply{withHeader(reply{status: 503, body: "overloaded"}, "Retry-After", "1"), okReply("x")},
			wantHits: 2, wantSleeps: []time.Duration{time.Second}},
		{name: "Retry-After beyond MaxRetryAfter",
			replies:  []reply{withHeader(errReply(429, "", "", "slow"), "Retry-After", "120")},
			wantErr:  []error{ErrRetryLater},
			notErr:   []error{ErrQuota, ErrRetryBudget, ErrPermanent},
			wantHits: 1, wantDelay: 120 * time.Second, wantStatus: 429},
		{name: "Retry-After beyond MaxRetryAfter on last attempt",
			replies:  []reply{{status: 500}, withHeader(reply{status: 503}, "Retry-After", "61")},
			mut:      func(c *Config) { c.MaxAttempts = 2 },
			wantErr:  []error{ErrRetryLater},
			wantHits: 2, wantSleeps: []time.Duration{50 * time.Millisecond}, wantDelay: 61 * time.Second, wantStatus: 503},
		{name: "exhaustion wraps last cause",
			replies:  []reply{{status: 500}, {status: 500}, errReply(503, "", "server_error", "overloaded")},
			mut:      func(c *Config) { c.MaxAttempts = 3 },
			wantErr:  []error{ErrRetryBudget},
			notErr:   []error{ErrPermanent, ErrRetryLater},
			wantHits: 3, wantStatus: 503,
			wantSleeps: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}},
		{name: "MaxAttempts 1: no retry",
			replies:  []reply{{status: 500}},
			mut:      func(c *Config) { c.MaxAttempts = 1 },
			wantErr:  []error{ErrRetryBudget},
			wantHits: 1, wantStatus: 500},
		{name: "400 permanent", replies: []reply{errReply(400, "invalid_value", "invalid_request_error", "bad")},
			wantErr: []error{ErrPermanent}, notErr: []error{ErrRetryBudget, ErrRetryLater, ErrProvider}, wantHits: 1, wantStatus: 400},
		{name: "401 the provider's", replies: []reply{errReply(401, "invalid_api_key", "invalid_request_error", "no")},
			wantErr: []error{ErrProvider, ErrPermanent}, wantHits: 1, wantStatus: 401},
		{name: "403 the provider's", replies: []reply{{status: 403, body: "forbidden"}},
			wantErr: []error{ErrProvider, ErrPermanent}, wantHits: 1, wantStatus: 403},
		{name: "403 with a budget code is quota", replies: []reply{errReply(403, "403", "budget_exceeded", "Budget has been exceeded!")},
			wantErr: []error{ErrQuota}, notErr: []error{ErrPermanent, ErrProvider}, wantHits: 1, wantDelay: time.Minute, wantStatus: 403},
		{name: "404 the provider's", replies: []reply{errReply(404, "model_not_found", "invalid_request_error", "no model")},
			wantErr: []error{ErrProvider, ErrPermanent}, wantHits: 1, wantStatus: 404},
		{name: "422 permanent", replies: []reply{{status: 422, body: `{"detail":"bad"}`}},
			wantErr: []error{ErrPermanent}, notErr: []error{ErrProvider}, wantHits: 1, wantStatus: 422},
		{name: "408 retried", replies: []reply{{status: 408}, okReply("x")},
			wantHits: 2, wantSleeps: []time.Duration{50 * time.Millisecond}},
		{name: "409 retried", replies: []reply{{status: 409}, okReply("x")},
			wantHits: 2, wantSleeps: []time.Duration{50 * time.Millisecond}},
		{name: "quota 429 not retried",
			replies:  []reply{quotaBody, okReply("x")},
			wantErr:  []error{ErrQuota, ErrRetryLater},
			notErr:   []error{ErrPermanent, ErrRetryBudget},
			wantHits: 1, wantDelay: 60 * time.Second, wantStatus: 429},
		{name: "quota 429 keeps its Retry-After",
			replies: []reply{withHeader(quotaBody, "Retry-After", "3600")},
			wantErr: []error{ErrQuota, ErrRetryLater}, wantHits: 1, wantDelay: time.Hour, wantStatus: 429},
		{name: "quota by type only",
			replies: []reply{errReply(429, "", "insufficient_quota", "x")},
			wantErr: []error{ErrQuota}, wantHits: 1, wantDelay: time.Minute, wantStatus: 429},
		{name: "quota by message only",
			replies: []reply{errReply(429, "", "", "Monthly spend limit reached")},
			wantErr: []error{ErrQuota}, wantHits: 1, wantDelay: time.Minute, wantStatus: 429},
		{name: "quota in non-JSON body",
			replies: []reply{{status: 429, body: "insufficient_quota: top up"}},
			wantErr: []error{ErrQuota}, wantHits: 1, wantDelay: time.Minute, wantStatus: 429},
		{name: "rate-limit code beats quota-sounding message",
			replies:  []reply{errReply(429, "rate_limit_exceeded", "tokens", "see billing page"), okReply("x")},
			wantHits: 2, wantSleeps: []time.Duration{50 * time.Millisecond}},
		{name: "400 with budget code is quota (LiteLLM)",
			replies: []reply{errReply(400, "400", "budget_exceeded", "Budget has been exceeded!")},
			wantErr: []error{ErrQuota}, notErr: []error{ErrPermanent}, wantHits: 1, wantDelay: time.Minute, wantStatus: 400},
		{name: "400 mentioning billing stays permanent",
			replies: []reply{errReply(400, "invalid_value", "invalid_request_error", "see billing docs")},
			wantErr: []error{ErrPermanent}, notErr: []error{ErrQuota}, wantHits: 1, wantStatus: 400},
		{name: "402 is quota",
			replies: []reply{errReply(402, "", "", "Insufficient credits")},
			wantErr: []error{ErrQuota, ErrRetryLater}, notErr: []error{ErrPermanent}, wantHits: 1, wantDelay: time.Minute, wantStatus: 402},
		{name: "malformed 200 retried",
			replies:  []reply{{status: 200, body: `{"choices":[`}, okReply("x")},
			wantHits: 2, wantSleeps: []time.Duration{50 * time.Millisecond}},
		{name: "200 without choices retried",
			replies:  []reply{{status: 200, body: `{"choices":[]}`}, okReply("x")},
			wantHits: 2, wantSleeps: []time.Duration{50 * time.Millisecond}},
		// Finding 7 of issue 9: a reply the client cannot use, every time,
		// ends the call after BadResponseAttempts (3) tries, not after
		// every attempt of every delivery.
		{name: "200 without choices for good",
			replies: []reply{{status: 200, body: `{"choices":[]}`}},
			wantErr: []error{ErrBadResponse}, notErr: []error{ErrRetryBudget, ErrPermanent, ErrRetryLater},
			wantHits: 3, wantStatus: 200, wantSleeps: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}},
		{name: "200 non-JSON for good",
			replies: []reply{{status: 200, body: `<html>we are sorry</html>`}},
			wantErr: []error{ErrBadResponse}, notErr: []error{ErrRetryBudget},
			wantHits: 3, wantStatus: 200, wantSleeps: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}},
		{name: "negative usage for good",
			replies: []reply{{status: 200, body: usageBody(-5, 7)}},
			wantErr: []error{ErrBadResponse}, notErr: []error{ErrRetryBudget},
			wantHits: 3, wantStatus: 200, wantSleeps: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}},
		{name: "absurd usage for good",
			replies: []reply{{status: 200, body: usageBody(11, MaxUsageTokens+1)}},
			wantErr: []error{ErrBadResponse}, notErr: []error{ErrRetryBudget},
			wantHits: 3, wantStatus: 200, wantSleeps: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}},
		{name: "negative usage once, then a good reply",
			replies:  []reply{{status: 200, body: usageBody(11, -1)}, okReply("x")},
			wantHits: 2, wantSleeps: []time.Duration{50 * time.Millisecond}},
		{name: "bad replies within MaxAttempts",
			replies: []reply{{status: 200, body: `{"choices":[]}`}},
			mut:     func(c *Config) { c.MaxAttempts = 2 },
			wantErr: []error{ErrBadResponse}, wantHits: 2, wantStatus: 200, wantSleeps: []time.Duration{50 * time.Millisecond}},
		{name: "BadResponseAttempts 1",
			replies: []reply{{status: 200, body: `{"choices":[]}`}},
			mut:     func(c *Config) { c.BadResponseAttempts = 1 },
			wantErr: []error{ErrBadResponse}, wantHits: 1, wantStatus: 200},
		{name: "bad replies counted apart from other failures",
			replies: []reply{{status: 500}, {status: 200, body: `{"choices":[]}`}, {status: 502}, {status: 200, body: `{"choices":[]}`}},
			wantErr: []error{ErrRetryBudget}, notErr: []error{ErrBadResponse},
			wantHits: 4, wantStatus: 200,
			wantSleeps: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, tt.replies...)
			c, s := testClient(t, f.srv.URL, tt.mut)
			res, err := c.Complete(context.Background(), hello)
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Complete: %v", err)
			}
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("err = %v, want errors.Is %v", err, want)
				}
			}
			for _, bad := range tt.notErr {
				if errors.Is(err, bad) {
					t.Errorf("err = %v, must not match %v", err, bad)
				}
			}
			if got := f.hits(); got != tt.wantHits {
				t.Errorf("server hits = %d, want %d", got, tt.wantHits)
			}
			if res.Attempts != tt.wantHits {
				t.Errorf("Attempts = %d, want %d", res.Attempts, tt.wantHits)
			}
			if got := s.got(); !slices.Equal(got, tt.wantSleeps) {
				t.Errorf("sleeps = %v, want %v", got, tt.wantSleeps)
			}
			var rl *RetryLaterError
			if errors.As(err, &rl) != (tt.wantDelay != 0) || (rl != nil && rl.Delay != tt.wantDelay) {
				t.Errorf("RetryLaterError = %+v, want Delay %v", rl, tt.wantDelay)
			}
			if got := HTTPStatus(err); got != tt.wantStatus {
				t.Errorf("HTTPStatus = %d, want %d", got, tt.wantStatus)
			}
			if err == nil && (len(res.Choices) != 1 || res.Choices[0].Content != "x") {
				t.Errorf("choices = %+v", res.Choices)
			}
		})
	}
}

func TestInvalidRequestNotSent(t *testing.T) {
	t.Parallel()
	f := newFake(t, okReply("x"))
	c, _ := testClient(t, f.srv.URL, nil)
	msgs := hello.Messages
	for name, req := range map[string]Request{
		"no messages":      {},
		"empty role":       {Messages: []Message{{Content: "x"}}},
		"negative T":       {Messages: msgs, Temperature: -0.1},
		"NaN T":            {Messages: msgs, Temperature: math.NaN()},
		"negative tokens":  {Messages: msgs, MaxTokens: -1},
		"negative choices": {Messages: msgs, N: -1},
	} {
		if _, err := c.Complete(context.Background(), req); !errors.Is(err, ErrPermanent) {
			t.Errorf("%s: err = %v, want ErrPermanent", name, err)
		}
	}
	if f.hits() != 0 {
		t.Errorf("server hit %d times", f.hits())
	}
}

func TestGoOpenAIRefusalIsPermanent(t *testing.T) {
	t.Parallel()
	// go-openai refuses max_tokens for reasoning models before sending.
	f := newFake(t, okReply("x"))
	c, s := testClient(t, f.srv.URL, func(c *Config) { c.Model = "o3-mini" })
	_, err := c.Complete(context.Background(), Request{Messages: hello.Messages, MaxTokens: 10})
	if !errors.Is(err, ErrPermanent) || f.hits() != 0 || len(s.got()) != 0 {
		t.Errorf("err = %v, hits %d, sleeps %v", err, f.hits(), s.got())
	}
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c, s := testClient(t, "http://"+addr, func(c *Config) { c.MaxAttempts = 3 })
	res, err := c.Complete(context.Background(), hello)
	if !errors.Is(err, ErrRetryBudget) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("err = %v, want ErrRetryBudget wrapping ECONNREFUSED", err)
	}
	if res.Attempts != 3 || len(s.got()) != 2 || HTTPStatus(err) != 0 {
		t.Errorf("attempts %d, sleeps %v, status %d", res.Attempts, s.got(), HTTPStatus(err))
	}
}

func TestConnectionReset(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first { // drop the connection without a response
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		_, _ = io.WriteString(w, okBody("x"))
	}))
	t.Cleanup(srv.Close)
	c, s := testClient(t, srv.URL, nil)
	res, err := c.Complete(context.Background(), hello)
	if err != nil || res.Attempts != 2 || len(s.got()) != 1 {
		t.Errorf("err %v, attempts %d, sleeps %v", err, res.Attempts, s.got())
	}
}

func TestTLSVerificationPermanent(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake error is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c, s := testClient(t, srv.URL, nil) // default client does not trust the test CA
	res, err := c.Complete(context.Background(), hello)
	if !errors.Is(err, ErrPermanent) || res.Attempts != 1 || len(s.got()) != 0 {
		t.Errorf("err %v, attempts %d, sleeps %v", err, res.Attempts, s.got())
	}
}

func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	t.Run("hang then ok", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, reply{hang: true}, okReply("x"))
		// Generous: the second, answered attempt must fit in it on a loaded CI
		// machine running every package under -race.
		c, s := testClient(t, f.srv.URL, func(c *Config) { c.AttemptTimeout = time.Second })
		res, err := c.Complete(context.Background(), hello)
		if err != nil || res.Attempts != 2 || f.hits() != 2 || len(s.got()) != 1 {
			t.Errorf("err %v, attempts %d, hits %d, sleeps %v", err, res.Attempts, f.hits(), s.got())
		}
	})
	t.Run("always hangs", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, reply{hang: true})
		c, _ := testClient(t, f.srv.URL, func(c *Config) { c.AttemptTimeout, c.MaxAttempts = 20*time.Millisecond, 2 })
		res, err := c.Complete(context.Background(), hello)
		if !errors.Is(err, ErrRetryBudget) || !errors.Is(err, ErrAttemptTimeout) ||
			errors.Is(err, context.DeadlineExceeded) || res.Attempts != 2 {
			t.Errorf("err %v, attempts %d", err, res.Attempts)
		}
	})
}

func TestCallerCancel(t *testing.T) {
	t.Parallel()
	t.Run("mid-backoff, real sleep", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, reply{status: 503})
		f.hit = make(chan struct{}, 1)
		c, _ := testClient(t, f.srv.URL, func(c *Config) {
			c.Sleep = nil // the real, ctx-honouring sleep
			c.BackoffBase, c.BackoffMax = time.Hour, time.Hour
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-f.hit
			cancel()
		}()
		start := time.Now()
		res, err := c.Complete(ctx, hello)
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrRetryBudget) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if el := time.Since(start); el > 10*time.Second {
			t.Errorf("took %v to notice cancellation", el)
		}
		if res.Attempts != 1 || f.hits() != 1 {
			t.Errorf("attempts %d, hits %d", res.Attempts, f.hits())
		}
	})
	t.Run("mid-attempt", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, reply{hang: true})
		f.hit = make(chan struct{}, 1)
		c, s := testClient(t, f.srv.URL, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-f.hit
			cancel()
		}()
		res, err := c.Complete(ctx, hello)
		if !errors.Is(err, context.Canceled) || res.Attempts != 1 || len(s.got()) != 0 {
			t.Errorf("err %v, attempts %d, sleeps %v", err, res.Attempts, s.got())
		}
	})
	t.Run("already done", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, okReply("x"))
		c, _ := testClient(t, f.srv.URL, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 0)
		defer cancel()
		res, err := c.Complete(ctx, hello)
		if !errors.Is(err, context.DeadlineExceeded) || res.Attempts != 0 || f.hits() != 0 {
			t.Errorf("err %v, attempts %d, hits %d", err, res.Attempts, f.hits())
		}
	})
}

type idKey struct{}

// TestConcurrentRetryAfter: 100 calls at once, each told a different
// Retry-After; each must wait its own and get its own answer.
func TestConcurrentRetryAfter(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seenID := map[int]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []Message `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Messages) != 1 {
			w.WriteHeader(400)
			return
		}
		id, _ := strconv.Atoi(body.Messages[0].Content)
		mu.Lock()
		again := seenID[id]
		seenID[id] = true
		mu.Unlock()
		if !again {
			w.Header().Set("Retry-After", strconv.Itoa(id))
			w.WriteHeader(429)
			_, _ = io.WriteString(w, `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		_, _ = io.WriteString(w, okBody("echo "+strconv.Itoa(id)))
	}))
	t.Cleanup(srv.Close)

	var smu sync.Mutex
	slept := map[int][]time.Duration{}
	c, _ := testClient(t, srv.URL, func(c *Config) {
		c.MaxRetryAfter = time.Hour
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			smu.Lock()
			defer smu.Unlock()
			id := ctx.Value(idKey{}).(int)
			slept[id] = append(slept[id], d)
			return nil
		}
	})
	const n = 100
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	for id := 1; id <= n; id++ {
		wg.Go(func() {
			ctx := context.WithValue(context.Background(), idKey{}, id)
			res, err := c.Complete(ctx, Request{Messages: []Message{{Role: "user", Content: strconv.Itoa(id)}}})
			switch {
			case err != nil:
				errs[id] = err
			case res.Attempts != 2 || res.Choices[0].Content != fmt.Sprintf("echo %d", id):
				errs[id] = fmt.Errorf("id %d: attempts %d, content %q", id, res.Attempts, res.Choices[0].Content)
			}
		})
	}
	wg.Wait()
	for id := 1; id <= n; id++ {
		if errs[id] != nil {
			t.Errorf("id %d: %v", id, errs[id])
		}
		if want := []time.Duration{time.Duration(id) * time.Second}; !slices.Equal(slept[id], want) {
			t.Errorf("id %d slept %v, want %v", id, slept[id], want)
		}
	}
}

func TestOnRetry(t *testing.T) {
	t.Parallel()
	f := newFake(t, reply{status: 500}, withHeader(reply{status: 429}, "Retry-After", "3"), okReply("x"))
	var events []RetryEvent
	c, _ := testClient(t, f.srv.URL, func(c *Config) { c.OnRetry = func(e RetryEvent) { events = append(events, e) } })
	if _, err := c.Complete(context.Background(), hello); err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].Attempt != 1 || events[0].Delay != 50*time.Millisecond || HTTPStatus(events[0].Err) != 500 ||
		events[1].Attempt != 2 || events[1].Delay != 3*time.Second || HTTPStatus(events[1].Err) != 429 {
		t.Errorf("events = %+v", events)
	}
}

func TestModels(t *testing.T) {
	t.Parallel()
	t.Run("ok", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, reply{status: 200, body: `{"object":"list","data":[{"id":"a"},{"id":"b"}]}`})
		c, _ := testClient(t, f.srv.URL, func(c *Config) { c.APIKey = "k" })
		ids, err := c.Models(context.Background())
		if err != nil || !slices.Equal(ids, []string{"a", "b"}) {
			t.Fatalf("Models = %v, %v", ids, err)
		}
		s := f.last()
		if s.method != http.MethodGet || s.path != "/v1/models" || s.header.Get("Authorization") != "Bearer k" {
			t.Errorf("request %s %s auth %q", s.method, s.path, s.header.Get("Authorization"))
		}
	})
	for _, tt := range []struct {
		status int
		want   error
	}{{401, ErrPermanent}, {503, ErrRetryBudget}} {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			f := newFake(t, reply{status: tt.status})
			c, s := testClient(t, f.srv.URL, nil)
			if _, err := c.Models(context.Background()); !errors.Is(err, tt.want) || f.hits() != 1 || len(s.got()) != 0 {
				t.Errorf("err %v, hits %d, sleeps %v", err, f.hits(), s.got())
			}
		})
	}
}

func TestCustomHTTPClientNotClosed(t *testing.T) {
	t.Parallel()
	f := newFake(t, okReply("x"))
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	c, _ := testClient(t, f.srv.URL, func(c *Config) { c.HTTPClient = hc })
	if _, err := c.Complete(context.Background(), hello); err != nil {
		t.Fatal(err)
	}
	if c.hc != hc || c.ownHTTP {
		t.Error("caller's HTTP client not used as is")
	}
}

// TestCheck: Check passes a server that lists the client's model, warns
// (ErrModelNotListed, naming what is listed) when the list lacks it or is
// empty, and fails with the call's error when the server refuses, errs or
// does not answer at all, in one attempt.
func TestCheck(t *testing.T) {
	t.Parallel()
	many := `{"object":"list","data":[` + strings.Repeat(`{"id":"m"},`, 11) + `{"id":"last"}]}`
	for _, tt := range []struct {
		name  string
		reply reply
		want  error  // nil: passes
		not   error  // must not match
		says  string // in the error
	}{
		{name: "listed", reply: reply{status: 200, body: `{"object":"list","data":[{"id":"a"},{"id":"test-model"}]}`}},
		{name: "not listed", reply: reply{status: 200, body: `{"object":"list","data":[{"id":"a"},{"id":"b"}]}`},
			want: ErrModelNotListed, says: `/v1 lists a, b; not "test-model"`},
		{name: "nothing listed", reply: reply{status: 200, body: `{"object":"list","data":[]}`},
			want: ErrModelNotListed, says: `lists no models, so "test-model" cannot be checked`},
		{name: "many listed", reply: reply{status: 200, body: many},
			want: ErrModelNotListed, says: "m, m, m, m, m, m, m, m, m, m, … (12 in all)"},
		{name: "refused", reply: reply{status: 401}, want: ErrPermanent, not: ErrModelNotListed, says: "401"},
		{name: "not found", reply: reply{status: 404}, want: ErrPermanent, not: ErrModelNotListed, says: "404"},
		{name: "server error", reply: reply{status: 503}, want: ErrRetryBudget, not: ErrModelNotListed, says: "503"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, tt.reply)
			c, _ := testClient(t, f.srv.URL, nil)
			err := c.Check(context.Background())
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Check = %v, want %v", err, tt.want)
			}
			if tt.not != nil && errors.Is(err, tt.not) {
				t.Errorf("Check = %v, which must not be %v", err, tt.not)
			}
			if err != nil && !strings.Contains(err.Error(), tt.says) {
				t.Errorf("Check = %v, want it to say %q", err, tt.says)
			}
			if f.hits() != 1 {
				t.Errorf("Check made %d requests, want 1", f.hits())
			}
		})
	}

	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		c, _ := testClient(t, "http://"+addr, nil)
		err = c.Check(context.Background())
		if err == nil || errors.Is(err, ErrModelNotListed) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("Check of a closed port = %v, want connection refused", err)
		}
	})
}
