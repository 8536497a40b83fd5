package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		ms, ra string
		want   time.Duration
		wantOK bool
	}{
		{"none", "", "", 0, false},
		{"seconds", "", "7", 7 * time.Second, true},
		{"seconds padded", "", " 7 ", 7 * time.Second, true},
		{"zero", "", "0", 0, true},
		{"fractional seconds", "", "1.5", 1500 * time.Millisecond, true},
		{"negative ignored", "", "-3", 0, false},
		{"garbage", "", "soon", 0, false},
		{"http-date future", "", t0.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"http-date past", "", t0.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"rfc850 date", "", t0.Add(5 * time.Second).Format(time.RFC850), 5 * time.Second, true},
		{"ms", "250", "", 250 * time.Millisecond, true},
		{"ms fractional", "12.5", "", 12500 * time.Microsecond, true},
		{"ms wins", "100", "9", 100 * time.Millisecond, true},
		{"bad ms falls back", "x", "2", 2 * time.Second, true},
		{"huge clamps", "", "1e300", maxDelay, true},
		{"inf ignored", "", "Inf", 0, false},
		{"nan ignored", "NaN", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseRetryAfter(tt.ms, tt.ra, t0)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("parseRetryAfter(%q, %q) = %v, %v; want %v, %v", tt.ms, tt.ra, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestDelay(t *testing.T) {
	t.Parallel()
	newC := func(base, maxB time.Duration, r float64) *Client {
		return &Client{cfg: Config{BackoffBase: base, BackoffMax: maxB, Rand: func() float64 { return r }}}
	}
	tests := []struct {
		name   string
		c      *Client
		failed int
		v      verdict
		want   time.Duration
	}{
		{"first, full ceiling", newC(250*time.Millisecond, 20*time.Second, 1), 1, verdict{}, 250 * time.Millisecond},
		{"doubles", newC(250*time.Millisecond, 20*time.Second, 1), 3, verdict{}, time.Second},
		{"capped", newC(250*time.Millisecond, 20*time.Second, 1), 10, verdict{}, 20 * time.Second},
		{"no overflow", newC(time.Second, time.Duration(math.MaxInt64), 1), 1000, verdict{}, time.Duration(math.MaxInt64)},
		{"jitter zero", newC(250*time.Millisecond, 20*time.Second, 0), 5, verdict{}, 0},
		{"jitter scales", newC(100*time.Millisecond, 20*time.Second, 0.25), 2, verdict{}, 50 * time.Millisecond},
		{"retry-after wins", newC(250*time.Millisecond, 20*time.Second, 1), 5, verdict{retryAfter: 2 * time.Second, hasRA: true}, 2 * time.Second},
		{"retry-after 0 jitters", newC(250*time.Millisecond, 20*time.Second, 0.5), 5, verdict{hasRA: true}, 125 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.c.delay(tt.failed, tt.v); got != tt.want {
				t.Errorf("delay = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSetTemperature(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		t    float64
		want string
	}{
		{`{"model":"m"}`, 0, `{"temperature":0,"model":"m"}`},
		{`{"model":"m","temperature":0.10000000149011612}`, 0.1, `{"model":"m","temperature":0.1}`},
		{`{"z":1,"a":[1,2],"model":"m"}`, 0.7, `{"temperature":0.7,"z":1,"a":[1,2],"model":"m"}`},
		{`{"model":"m"}`, math.Copysign(0, -1), `{"temperature":0,"model":"m"}`},
		{`{"model":"m"}`, 1e-9, `{"temperature":0.000000001,"model":"m"}`},
		{` { }`, 2, `{"temperature":2}`},
		{`{"messages":[{"content":"say \"temperature\" twice"}]}`, 0, `{"temperature":0,"messages":[{"content":"say \"temperature\" twice"}]}`},
	}
	for _, tt := range tests {
		got, err := setTemperature([]byte(tt.in), tt.t)
		if err != nil || string(got) != tt.want {
			t.Errorf("setTemperature(%s, %v) = %s, %v; want %s", tt.in, tt.t, got, err, tt.want)
		}
	}
	for _, bad := range []string{``, `null`, `[1]`, `{"a":`} {
		if _, err := setTemperature([]byte(bad), 0); err == nil {
			t.Errorf("setTemperature(%q): want error", bad)
		}
	}
}

func TestRetryLaterErrorIs(t *testing.T) {
	t.Parallel()
	cause := errors.New("boom")
	rl := fmt.Errorf("wrapped: %w", &RetryLaterError{Delay: time.Second, Cause: cause})
	q := &RetryLaterError{Delay: time.Minute, Quota: true, Cause: cause}
	switch {
	case !errors.Is(rl, ErrRetryLater), errors.Is(rl, ErrQuota), !errors.Is(rl, cause):
		t.Errorf("rate-limit RetryLaterError matching wrong: %v", rl)
	case !errors.Is(q, ErrRetryLater), !errors.Is(q, ErrQuota), errors.Is(q, ErrPermanent):
		t.Errorf("quota RetryLaterError matching wrong: %v", q)
	}
}

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("x"), 0},
		{fmt.Errorf("w: %w", &openai.APIError{HTTPStatusCode: 404}), 404},
		{&openai.RequestError{HTTPStatusCode: 502, Err: &openai.APIError{}}, 502},
		{&httpError{status: 200, err: errNoChoices}, 200},
	}
	for _, tt := range tests {
		if got := HTTPStatus(tt.err); got != tt.want {
			t.Errorf("HTTPStatus(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestSleepCtx(t *testing.T) {
	t.Parallel()
	if err := sleepCtx(context.Background(), 0); err != nil {
		t.Errorf("zero sleep: %v", err)
	}
	if err := sleepCtx(context.Background(), time.Microsecond); err != nil {
		t.Errorf("short sleep: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sleepCtx(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled sleep: %v", err)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "7", "1.5", "-1", "1e400", "NaN", t0.Format(http.TimeFormat), "Sun, 06 Nov 1994"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, ms, ra string) {
		d, ok := parseRetryAfter(ms, ra, t0)
		if d < 0 || (!ok && d != 0) {
			t.Errorf("parseRetryAfter(%q, %q) = %v, %v", ms, ra, d, ok)
		}
	})
}

func FuzzSetTemperature(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), 0.1)
	f.Add([]byte(`{"temperature":5}`), 0.0)
	f.Add([]byte(`{}`), 2.0)
	f.Fuzz(func(t *testing.T, in []byte, temp float64) {
		if math.IsNaN(temp) || math.IsInf(temp, 0) || temp < 0 {
			return // rejected by Complete before the doer
		}
		out, err := setTemperature(in, temp)
		if err != nil {
			return
		}
		var before, after map[string]json.RawMessage
		if err := json.Unmarshal(in, &before); err != nil {
			t.Fatalf("accepted invalid input %q", in)
		}
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("output not JSON: %q", out)
		}
		got, err := strconv.ParseFloat(string(after["temperature"]), 64)
		if err != nil || got != temp {
			t.Fatalf("temperature %s, want %v", after["temperature"], temp)
		}
		for k, v := range before {
			if k == "temperature" {
				continue
			}
			var a, b any
			_ = json.Unmarshal(v, &a)
			_ = json.Unmarshal(after[k], &b)
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if !bytes.Equal(ja, jb) {
				t.Fatalf("field %s changed: %s -> %s", k, v, after[k])
			}
		}
	})
}
