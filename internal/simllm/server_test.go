package simllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{"zero", Config{}, ""},
		{"full", Config{Accuracy: 1, MalformedRate: 0.5, OverlongRate: 0.5, RateLimitRate: 0.2, ServerErrorRate: 0.8, TemperatureSensitivity: -1, RetryAfter: NoRetryAfter}, ""},
		{"accuracy above 1", Config{Accuracy: 1.1}, "Accuracy 1.1 outside [0, 1]"},
		{"accuracy NaN", Config{Accuracy: math.NaN()}, "Accuracy NaN"},
		{"negative rate", Config{MalformedRate: -0.1}, "MalformedRate -0.1"},
		{"red flags exceed 1", Config{MalformedRate: 0.6, OverlongRate: 0.5}, "MalformedRate 0.6 + OverlongRate 0.5 exceeds 1"},
		{"faults exceed 1", Config{RateLimitRate: 0.6, ServerErrorRate: 0.6}, "RateLimitRate 0.6 + ServerErrorRate 0.6 exceeds 1"},
		{"negative latency", Config{Latency: -time.Second}, "negative Latency"},
		{"negative jitter", Config{LatencyJitter: -time.Second}, "negative LatencyJitter"},
		{"infinite sensitivity", Config{TemperatureSensitivity: math.Inf(1)}, "TemperatureSensitivity"},
		{"model spaces", Config{Model: " sim "}, "spaces around Model"},
		{"models", Config{Models: []string{"a", "org/b", AnyModel}}, ""},
		{"model any", Config{Model: AnyModel}, `model "*" as Model`},
		{"models empty name", Config{Models: []string{"a", ""}}, `model list entry 1 ("")`},
		{"models spaces", Config{Models: []string{"a "}}, `model list entry 0 ("a ")`},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want it to contain %q", tt.name, err, tt.want)
		}
		if _, nerr := New(tt.cfg); (nerr == nil) != (err == nil) {
			t.Errorf("%s: New and Validate disagree: %v vs %v", tt.name, nerr, err)
		}
	}
}

func TestEffectiveAccuracy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  Config
		temp float64
		want float64
	}{
		{Config{}, 0, 0.95},
		{Config{}, 0.1, 0.95},
		{Config{}, 1, 0.7475},
		{Config{}, 2, 0.5225},
		{Config{Accuracy: 0.9, TemperatureSensitivity: 2}, 1.1, 0.5},
		{Config{Accuracy: 0.9, TemperatureSensitivity: -1}, 2, 0.9},
		{Config{Accuracy: 0.4}, 1, 0.4},
	}
	for _, tt := range tests {
		if got := tt.cfg.EffectiveAccuracy(tt.temp); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%+v at T=%v: %v, want %v", tt.cfg, tt.temp, got, tt.want)
		}
	}
}

func TestResponseShape(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Accuracy: 1, Seed: 3})
	in := mustInstance(t, 4)
	body := chatBody(t, in, in.Initial(), map[string]any{"model": "gpt-4.1-mini", "temperature": 0.1, "n": 3, "seed": 9})
	w := post(s, body)
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" || !strings.HasPrefix(w.Header().Get("X-Request-Id"), "req_") {
		t.Fatalf("status %d headers %v", w.Code, w.Header())
	}
	// The raw shape, field by field, as OpenAI sends it.
	var raw map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "object", "created", "model", "choices", "usage", "system_fingerprint"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("response lacks %q", k)
		}
	}
	var resp chatResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Object != "chat.completion" || resp.Model != "gpt-4.1-mini" ||
		!strings.HasPrefix(resp.SystemFingerprint, "fp_") || time.Since(time.Unix(resp.Created, 0)).Abs() > time.Minute {
		t.Errorf("header fields: %+v", resp)
	}
	if len(resp.Choices) != 3 {
		t.Fatalf("%d choices, want 3", len(resp.Choices))
	}
	completion := 0
	for i, c := range resp.Choices {
		if c.Index != i || c.Message.Role != "assistant" || c.FinishReason != "stop" || string(c.Logprobs) != "null" {
			t.Errorf("choice %d: %+v", i, c)
		}
		a, err := hanoi.ParseAnswer(c.Message.Content, 4)
		if err != nil || a.Move != (hanoi.Move{1, 0, 1}) {
			t.Errorf("choice %d: %v %v", i, a, err)
		}
		completion += tokenCount(c.Message.Content)
	}
	msgs := messages(t, in, in.Initial())
	prompt := 0
	for _, m := range msgs {
		prompt += (len(m["content"])+3)/4 + 4
	}
	u := resp.Usage
	if u.PromptTokens != prompt || u.CompletionTokens != completion || u.TotalTokens != prompt+completion {
		t.Errorf("usage %+v, want prompt %d completion %d", u, prompt, completion)
	}
	if second := mustChat(t, s, body); second.ID == resp.ID {
		t.Errorf("ids repeat: %s", resp.ID)
	}
}

// Content is a pure function of the documented inputs: never of arrival
// order or concurrency.
func TestDeterminism(t *testing.T) {
	t.Parallel()
	cfg := Config{Accuracy: 0.7, MalformedRate: 0.1, OverlongRate: 0.05, Seed: 11}
	in := mustInstance(t, 5)
	state := walk(t, in, 6)[5]
	contents := func(s *Server, extra map[string]any) []string {
		resp := mustChat(t, s, chatBody(t, in, state, extra))
		out := make([]string, len(resp.Choices))
		for i, c := range resp.Choices {
			out[i] = c.Message.Content
		}
		return out
	}
	s1, s2 := newServer(t, cfg), newServer(t, cfg)
	eq := func(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

	req := map[string]any{"temperature": 0.1, "seed": 5, "n": 4}
	want := contents(s1, req)
	if got := contents(s2, req); !eq(got, want) {
		t.Fatal("same request on two servers differs")
	}
	if got := contents(s1, req); !eq(got, want) {
		t.Fatal("same request twice differs")
	}
	if d := map[string]bool{}; func() bool {
		for _, c := range want {
			d[c] = true
		}
		return len(d) < 2
	}() {
		t.Errorf("n=4 at T=0.1 gave identical choices: independent draws expected")
	}

	// Concurrently, interleaved with other traffic.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			if i%2 == 1 {
				contents(s1, map[string]any{"temperature": 0.1, "seed": i})
				return
			}
			if got := contents(s1, req); !eq(got, want) {
				errs <- fmt.Errorf("concurrent request %d differs", i)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Different request seeds at T=0.1 give different content sometimes.
	distinct := map[string]bool{}
	for seed := range 20 {
		distinct[contents(s1, map[string]any{"temperature": 0.1, "seed": seed})[0]] = true
	}
	if len(distinct) < 5 {
		t.Errorf("20 seeds at T=0.1 gave %d distinct replies", len(distinct))
	}

	// T=0 decodes greedily: seed and choice index are ignored.
	greedy := contents(s1, map[string]any{"temperature": 0, "seed": 1, "n": 5})
	for _, extra := range []map[string]any{{"temperature": 0}, {"temperature": 0, "seed": 99, "n": 2}, {"temperature": 0.0, "max_tokens": 500}} {
		for _, c := range contents(s1, extra) {
			if c != greedy[0] {
				t.Fatalf("T=0 with %v differs", extra)
			}
		}
	}
	for _, c := range greedy {
		if c != greedy[0] {
			t.Fatal("T=0 choices differ")
		}
	}

	// Without a seed the body stands in for it: still deterministic.
	noSeed := map[string]any{"temperature": 0.7, "n": 3}
	if a, b := contents(s1, noSeed), contents(s2, noSeed); !eq(a, b) {
		t.Error("seedless request not deterministic")
	}

	// Config.Seed is a different model: answers differ somewhere.
	other := newServer(t, Config{Accuracy: 0.7, MalformedRate: 0.1, OverlongRate: 0.05, Seed: 12})
	same := 0
	for seed := range 10 {
		r := map[string]any{"temperature": 0.1, "seed": seed}
		if eq(contents(s1, r), contents(other, r)) {
			same++
		}
	}
	if same == 10 {
		t.Error("Config.Seed changes nothing")
	}
}

// tally draws choices for prompts along a 6-disk run and classifies them
// with the task's own parser and verifier.
type tally struct{ correct, wrong, malformed, overlong int }

func (ty *tally) add(t *testing.T, in *hanoi.Instance, s task.State, c string, finish string) {
	t.Helper()
	if finish == "length" {
		ty.overlong++
		return
	}
	v, err := in.Parse(s, c)
	if err != nil {
		ty.malformed++
		return
	}
	if in.Verify(s, v) == nil {
		ty.correct++
	} else {
		ty.wrong++
	}
}

func drawMany(t *testing.T, s *Server, in *hanoi.Instance, requests int, extra map[string]any) tally {
	t.Helper()
	states := walk(t, in, 64)
	var ty tally
	for i := range requests {
		st := states[i%len(states)]
		req := map[string]any{"seed": i, "n": 16}
		for k, v := range extra {
			req[k] = v
		}
		resp := mustChat(t, s, chatBody(t, in, st, req))
		for _, c := range resp.Choices {
			ty.add(t, in, st, c.Message.Content, c.FinishReason)
		}
	}
	return ty
}

func TestAccuracyStatistics(t *testing.T) {
	t.Parallel()
	cfg := Config{Accuracy: 0.9, MalformedRate: 0.05, OverlongRate: 0.03, Seed: 1}
	s := newServer(t, cfg)
	in := mustInstance(t, 6)

	const requests = 250 // 4000 choices
	cold := drawMany(t, s, in, requests, map[string]any{"temperature": 0.1})
	total := float64(requests * 16)
	within := func(name string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %.4f, want %.4f ± %.3f", name, got, want, tol)
		}
	}
	within("malformed share", float64(cold.malformed)/total, 0.05, 0.015)
	within("overlong share", float64(cold.overlong)/total, 0.03, 0.012)
	pCold := float64(cold.correct) / float64(cold.correct+cold.wrong)
	within("accuracy at T=0.1", pCold, 0.9, 0.03)

	st := s.Stats()
	if st.Correct != int64(cold.correct) || st.Wrong != int64(cold.wrong) || st.Malformed != int64(cold.malformed) || st.Overlong != int64(cold.overlong) {
		t.Errorf("stats %+v disagree with the parser's tally %+v", st, cold)
	}

	// A client that omits temperature samples at T=1: visibly worse.
	hot := drawMany(t, s, in, requests, nil)
	pHot := float64(hot.correct) / float64(hot.correct+hot.wrong)
	within("accuracy without temperature", pHot, cfg.EffectiveAccuracy(1), 0.035)
	if pHot > pCold-0.1 {
		t.Errorf("accuracy without temperature %.3f not visibly below %.3f", pHot, pCold)
	}
}

func TestOverlongAndTokenLimits(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 3)
	always := newServer(t, Config{OverlongRate: 1})
	never := newServer(t, Config{Accuracy: 1})
	tests := []struct {
		name       string
		s          *Server
		extra      map[string]any
		wantFinish string
		wantTokens int // per choice; 0: not checked
	}{
		{"overlong max_tokens", always, map[string]any{"max_tokens": 750}, "length", 750},
		{"overlong max_completion_tokens", always, map[string]any{"max_completion_tokens": 100}, "length", 100},
		{"overlong both: the smaller", always, map[string]any{"max_tokens": 90, "max_completion_tokens": 120}, "length", 90},
		{"overlong no limit", always, nil, "length", OverlongTokens},
		{"normal cut by a small limit", never, map[string]any{"max_tokens": 5}, "length", 5},
		{"normal fits", never, map[string]any{"max_tokens": 200}, "stop", 0},
	}
	for _, tt := range tests {
		extra := map[string]any{"n": 2, "temperature": 0.1, "seed": 1}
		for k, v := range tt.extra {
			extra[k] = v
		}
		resp := mustChat(t, tt.s, chatBody(t, in, in.Initial(), extra))
		for _, c := range resp.Choices {
			if c.FinishReason != tt.wantFinish {
				t.Errorf("%s: finish_reason %q", tt.name, c.FinishReason)
			}
			if tt.wantTokens > 0 && len(c.Message.Content) != 4*tt.wantTokens {
				t.Errorf("%s: %d bytes, want %d", tt.name, len(c.Message.Content), 4*tt.wantTokens)
			}
		}
		if tt.wantTokens > 0 && resp.Usage.CompletionTokens != 2*tt.wantTokens {
			t.Errorf("%s: completion_tokens %d, want %d", tt.name, resp.Usage.CompletionTokens, 2*tt.wantTokens)
		}
	}
	if got := never.Stats().Overlong; got != 2 {
		t.Errorf("replies cut at max_tokens counted overlong %d times, want 2", got)
	}
}

func TestUnrecognizedPrompt(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{})
	body := `{"model":"sim-1","messages":[{"role":"user","content":[{"type":"text","text":"What's the weather like?"}]}],"n":2,"temperature":0.5}`
	resp := mustChat(t, s, body)
	for _, c := range resp.Choices {
		if strings.Contains(c.Message.Content, "=") || c.FinishReason != "stop" || len(c.Message.Content) < 40 {
			t.Errorf("reply: %q", c.Message.Content)
		}
	}
	if st := s.Stats(); st.Unrecognized != 2 || st.Choices != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestRateLimitAndServerErrors(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 2)
	body := chatBody(t, in, in.Initial(), map[string]any{"temperature": 0})
	tests := []struct {
		name       string
		cfg        Config
		hdr        []string
		wantStatus int
		wantRA     string // Retry-After
		wantRAms   string
	}{
		{"rate default", Config{RateLimitRate: 1}, nil, 429, "1", "1000"},
		{"rate rounds up", Config{RateLimitRate: 1, RetryAfter: 1500 * time.Millisecond}, nil, 429, "2", "1500"},
		{"rate sub-second", Config{RateLimitRate: 1, RetryAfter: 20 * time.Millisecond}, nil, 429, "1", "20"},
		{"rate no header", Config{RateLimitRate: 1, RetryAfter: NoRetryAfter}, nil, 429, "", ""},
		{"server error", Config{ServerErrorRate: 1}, nil, 500, "", ""},
		{"forced rate", Config{}, []string{"X-Sim-Fault", "rate_limit"}, 429, "1", "1000"},
		{"forced server", Config{}, []string{"X-Sim-Fault", " Server_Error "}, 500, "", ""},
	}
	for _, tt := range tests {
		s := newServer(t, tt.cfg)
		w := post(s, body, tt.hdr...)
		if w.Code != tt.wantStatus || w.Header().Get("Retry-After") != tt.wantRA || w.Header().Get("Retry-After-Ms") != tt.wantRAms {
			t.Errorf("%s: status %d Retry-After %q retry-after-ms %q", tt.name, w.Code, w.Header().Get("Retry-After"), w.Header().Get("Retry-After-Ms"))
		}
		var e errorResponse
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		wantType, wantCode := "server_error", ""
		if tt.wantStatus == 429 {
			wantType, wantCode = "requests", "rate_limit_exceeded"
		}
		if e.Error.Type != wantType || deref(e.Error.Code) != wantCode || e.Error.Message == "" {
			t.Errorf("%s: error body %s", tt.name, w.Body)
		}
	}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// "times=N" faults the first N arrivals of a body, then answers: the retry
// path a client must survive.
func TestForcedFaultTimes(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Accuracy: 1})
	in := mustInstance(t, 2)
	a := chatBody(t, in, in.Initial(), map[string]any{"temperature": 0.1, "seed": 1})
	b := chatBody(t, in, in.Initial(), map[string]any{"temperature": 0.1, "seed": 2})
	hdr := []string{"X-Sim-Fault", "rate_limit; times=2"}
	var codes []int
	for _, body := range []string{a, a, b, a, a, b, b} {
		codes = append(codes, post(s, body, hdr...).Code)
	}
	want := []int{429, 429, 429, 200, 200, 429, 200}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("codes %v, want %v", codes, want)
	}
	for _, h := range []string{"rate_limit;times=0", "rate_limit; count=2", "teapot", "server_error; times=x"} {
		if w := post(s, a, "X-Sim-Fault", h); w.Code != 400 || !strings.Contains(w.Body.String(), "X-Sim-Fault") {
			t.Errorf("header %q: %d %s", h, w.Code, w.Body)
		}
	}
}

func TestRequestErrors(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{})
	msgs := `[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, method, path, body string
		status                   int
		param, code              string
	}{
		{"invalid json", "POST", "/v1/chat/completions", `{"model":`, 400, "", ""},
		{"not an object", "POST", "/v1/chat/completions", `[1,2]`, 400, "", ""},
		{"empty body", "POST", "/v1/chat/completions", ``, 400, "", ""},
		{"missing model", "POST", "/v1/chat/completions", `{"messages":` + msgs + `}`, 400, "model", "missing_required_parameter"},
		{"missing messages", "POST", "/v1/chat/completions", `{"model":"m"}`, 400, "messages", "missing_required_parameter"},
		{"null messages", "POST", "/v1/chat/completions", `{"model":"m","messages":null}`, 400, "messages", "missing_required_parameter"},
		{"empty messages", "POST", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "messages", "empty_array"},
		{"bad role", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"wizard","content":"x"}]}`, 400, "messages[0].role", "invalid_value"},
		{"missing role", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"},{"content":"x"}]}`, 400, "messages[1].role", "missing_required_parameter"},
		{"content number", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", "invalid_type"},
		{"n zero", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"n":0}`, 400, "n", "integer_below_min_value"},
		{"n 17", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"n":17}`, 400, "n", "integer_above_max_value"},
		{"n string", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"n":"2"}`, 400, "n", "invalid_type"},
		{"temperature negative", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"temperature":-0.1}`, 400, "temperature", "decimal_below_min_value"},
		{"temperature 2.5", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"temperature":2.5}`, 400, "temperature", "decimal_above_max_value"},
		{"temperature string", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"temperature":"hot"}`, 400, "temperature", "invalid_type"},
		{"stream_options without stream", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"stream_options":{"include_usage":true}}`, 400, "stream_options", "invalid_value"},
		{"stream_options with stream false", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"stream":false,"stream_options":{}}`, 400, "stream_options", "invalid_value"},
		{"stream not a boolean", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"stream":"yes"}`, 400, "stream", "invalid_type"},
		{"max_tokens 0", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"max_tokens":0}`, 400, "max_tokens", "integer_below_min_value"},
		{"max_completion_tokens 0", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"max_completion_tokens":0}`, 400, "max_completion_tokens", "integer_below_min_value"},
		{"max_tokens too large", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"max_tokens":100000}`, 400, "max_tokens", "integer_above_max_value"},
		{"seed fraction", "POST", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"seed":1.5}`, 400, "seed", "invalid_type"},
		{"too large", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", MaxBodyBytes) + `"}]}`, 413, "", "request_too_large"},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, "", ""},
		{"unknown path", "POST", "/v1/completions", `{}`, 404, "", ""},
		{"no v1 prefix", "POST", "/chat/completions", `{}`, 404, "", ""},
		{"models wrong method", "POST", "/v1/models", ``, 405, "", ""},
		{"unknown model", "GET", "/v1/models/gpt-9", ``, 404, "model", "model_not_found"},
	}
	for _, tt := range tests {
		w := do(s, tt.method, tt.path, tt.body)
		if w.Code != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.name, w.Code, tt.status, w.Body)
			continue
		}
		var raw map[string]map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil || len(raw) != 1 || len(raw["error"]) != 4 {
			t.Errorf("%s: error body %s (%v)", tt.name, w.Body, err)
			continue
		}
		var e errorResponse
		_ = json.Unmarshal(w.Body.Bytes(), &e)
		if e.Error.Type != "invalid_request_error" || e.Error.Message == "" || deref(e.Error.Param) != tt.param || deref(e.Error.Code) != tt.code {
			t.Errorf("%s: error %+v param %q code %q", tt.name, e.Error, deref(e.Error.Param), deref(e.Error.Code))
		}
	}
	if st := s.Stats(); st.BadRequests != 25 || st.Requests != 25 || st.Completions != 0 {
		t.Errorf("stats %+v: want 25 bad chat requests", st)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{APIKey: "sk-sim-secret"})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name, method, path, auth string
		status                   int
		code                     string
	}{
		{"none", "POST", "/v1/chat/completions", "", 401, ""},
		{"wrong", "POST", "/v1/chat/completions", "Bearer sk-sim-wrong", 401, "invalid_api_key"},
		{"not bearer", "POST", "/v1/chat/completions", "Basic sk-sim-secret", 401, "invalid_api_key"},
		{"right", "POST", "/v1/chat/completions", "Bearer sk-sim-secret", 200, ""},
		{"models without key", "GET", "/v1/models", "", 401, ""},
		{"models with key", "GET", "/v1/models", "Bearer sk-sim-secret", 200, ""},
		{"stats open", "GET", "/sim/stats", "", 200, ""},
	}
	for _, tt := range tests {
		var hdr []string
		if tt.auth != "" {
			hdr = []string{"Authorization", tt.auth}
		}
		w := do(s, tt.method, tt.path, body, hdr...)
		if w.Code != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, w.Code, tt.status)
		}
		if tt.status == 401 {
			var e errorResponse
			_ = json.Unmarshal(w.Body.Bytes(), &e)
			if deref(e.Error.Code) != tt.code || strings.Contains(e.Error.Message, "secret") || strings.Contains(e.Error.Message, "wrong") {
				t.Errorf("%s: %s", tt.name, w.Body)
			}
		}
	}
	if st := s.Stats(); st.Unauthorized != 3 || st.Completions != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestModels(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Model: "org/sim-large"})
	w := do(s, "GET", "/v1/models", "")
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object, OwnedBy string
			Created             int64
		} `json:"data"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || list.Object != "list" || len(list.Data) != 1 ||
		list.Data[0].ID != "org/sim-large" || list.Data[0].Object != "model" || list.Data[0].Created == 0 {
		t.Errorf("list: %s (%v)", w.Body, err)
	}
	w = do(s, "GET", "/v1/models/org/sim-large", "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"org/sim-large"`) {
		t.Errorf("retrieve: %d %s", w.Code, w.Body)
	}
	// Requests may still name any model.
	resp := mustChat(t, s, `{"model":"anything","messages":[{"role":"user","content":"hi"}]}`)
	if resp.Model != "anything" {
		t.Errorf("model %q", resp.Model)
	}
}

// syncBuffer is a log sink tests can read while the server writes.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	var log syncBuffer
	s := newServer(t, Config{LogRequests: &log, RateLimitRate: 0.3, Seed: 4})
	in := mustInstance(t, 3)
	withTemp := chatBody(t, in, in.Initial(), map[string]any{"temperature": 0, "seed": 1, "user": "a<b>&c"})
	noTemp := chatBody(t, in, in.Initial(), map[string]any{"seed": 1})
	pretty := "{\n  \"model\": \"m\",\n  \"temperature\": null,\n  \"messages\": [{\"role\": \"user\", \"content\": \"line1\\nline2\"}]\n}"
	typeErr := `{"model":"m","messages":[{"role":"user","content":"x"}],"n":"two"}`
	badJSON := `{"model":`
	want := []string{
		withTemp,
		strings.TrimSuffix(noTemp, "}") + `,"temperature":null}`,
		`{"model":"m","temperature":null,"messages":[{"role":"user","content":"line1\nline2"}]}`,
		strings.TrimSuffix(typeErr, "}") + `,"temperature":null}`,
		`{"temperature":null}`,
	}
	for _, body := range []string{withTemp, noTemp, pretty, typeErr, badJSON, `{}`} {
		post(s, body)
	}
	lines := strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), log.String())
	}
	for i, l := range lines {
		if l != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, l, want[i])
		}
	}

	// Concurrent requests: one whole, valid line each.
	var clog syncBuffer
	cs := newServer(t, Config{LogRequests: &clog, Latency: time.Millisecond})
	var wg sync.WaitGroup
	const N = 50
	for i := range N {
		wg.Go(func() {
			extra := map[string]any{"seed": i, "n": 1 + i%3}
			if i%2 == 0 {
				extra["temperature"] = 0.1
			}
			post(cs, chatBody(t, in, in.Initial(), extra))
		})
	}
	wg.Wait()
	seeds := map[int64]bool{}
	clines := strings.Split(strings.TrimSuffix(clog.String(), "\n"), "\n")
	for _, l := range clines {
		var v struct {
			Seed        int64            `json:"seed"`
			Temperature *float64         `json:"temperature"`
			Messages    []map[string]any `json:"messages"`
			Raw         map[string]any   `json:"-"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil || len(v.Messages) != 2 {
			t.Fatalf("bad line %q: %v", l, err)
		}
		var keys map[string]json.RawMessage
		_ = json.Unmarshal([]byte(l), &keys)
		if _, ok := keys["temperature"]; !ok {
			t.Errorf("line without temperature: %s", l)
		}
		if (v.Temperature == nil) != (v.Seed%2 == 1) {
			t.Errorf("seed %d: temperature %v", v.Seed, v.Temperature)
		}
		seeds[v.Seed] = true
	}
	if len(clines) != N || len(seeds) != N || clog.writes != N {
		t.Errorf("%d lines, %d seeds, %d writes; want %d", len(clines), len(seeds), clog.writes, N)
	}
}

// The counters add up: every chat request ends in exactly one way.
func TestStatsInvariants(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{APIKey: "k", RateLimitRate: 0.2, ServerErrorRate: 0.1, MalformedRate: 0.2, OverlongRate: 0.1, Seed: 8})
	in := mustInstance(t, 4)
	for i := range 200 {
		body := chatBody(t, in, walk(t, in, 10)[i%10], map[string]any{"seed": i, "n": 1 + i%4, "temperature": 0.1})
		auth := "Bearer k"
		switch i % 17 {
		case 3:
			auth = "Bearer nope"
		case 5:
			body = `{"model":"m"}`
		}
		do(s, "POST", "/v1/chat/completions", body, "Authorization", auth)
	}
	w := do(s, "GET", "/sim/stats", "")
	var st Stats
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if st != s.Stats() {
		t.Errorf("/sim/stats %+v differs from Stats() %+v", st, s.Stats())
	}
	if st.Requests != 200 || st.Requests != st.Completions+st.RateLimited+st.ServerErrors+st.BadRequests+st.Unauthorized+st.Canceled+st.UnknownModels {
		t.Errorf("requests do not add up: %+v", st)
	}
	if st.Choices != st.Correct+st.Wrong+st.Malformed+st.Overlong+st.Unrecognized+st.BreakGlass {
		t.Errorf("choices do not add up: %+v", st)
	}
	for name, v := range map[string]int64{"rate_limited": st.RateLimited, "server_errors": st.ServerErrors, "bad_requests": st.BadRequests,
		"unauthorized": st.Unauthorized, "malformed": st.Malformed, "overlong": st.Overlong, "prompt_tokens": st.PromptTokens} {
		if v == 0 {
			t.Errorf("%s is 0: %+v", name, st)
		}
	}
	var keys map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &keys)
	for _, k := range []string{"requests", "completions", "choices", "correct", "wrong", "malformed", "overlong", "unrecognized", "rate_limited", "server_errors", "bad_requests", "unauthorized"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("/sim/stats lacks %q", k)
		}
	}
}

func TestServeErrorsAreNotPanics(t *testing.T) {
	t.Parallel()
	// The handler must survive a body that fails mid-read.
	s := newServer(t, Config{})
	r, _ := http.NewRequest("POST", "/v1/chat/completions", failingReader{})
	w := &discardWriter{h: http.Header{}}
	s.ServeHTTP(w, r)
	if w.code != 400 {
		t.Errorf("status %d", w.code)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

type discardWriter struct {
	h    http.Header
	code int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(code int)        { d.code = code }
