package simllm

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A streamed answer is the non-streamed one cut into chunks: same content,
// finish reasons and usage, for every kind of answer and option.
func TestStreamMatchesCompletion(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 4)
	tests := []struct {
		name  string
		cfg   Config
		extra map[string]any
		usage bool
	}{
		{"one choice", Config{Accuracy: 1}, map[string]any{"temperature": 0}, false},
		{"one choice with usage", Config{Accuracy: 1}, map[string]any{"temperature": 0}, true},
		{"three choices with usage", Config{Accuracy: 0.6, Seed: 4}, map[string]any{"n": 3, "temperature": 0.7, "seed": 5}, true},
		{"overlong cut at max_tokens", Config{OverlongRate: 1}, map[string]any{"n": 2, "max_tokens": 300, "temperature": 0.1, "seed": 1}, true},
		{"overlong no limit", Config{OverlongRate: 1}, map[string]any{"temperature": 0.1, "seed": 1}, false},
		{"malformed", Config{MalformedRate: 1}, map[string]any{"n": 2, "temperature": 0.1, "seed": 2}, true},
		{"include_usage false", Config{Accuracy: 1}, map[string]any{"temperature": 0}, false},
	}
	for _, tt := range tests {
		s := newServer(t, tt.cfg)
		want := mustChat(t, s, chatBody(t, in, in.Initial(), tt.extra))
		extra := map[string]any{"stream": true}
		if tt.usage {
			extra["stream_options"] = map[string]any{"include_usage": true}
		} else if tt.name == "include_usage false" {
			extra["stream_options"] = map[string]any{"include_usage": false}
		}
		for k, v := range tt.extra {
			extra[k] = v
		}
		w := post(s, chatBody(t, in, in.Initial(), extra))
		if w.Code != 200 || w.Header().Get("Content-Type") != "text/event-stream; charset=utf-8" || !strings.HasPrefix(w.Header().Get("X-Request-Id"), "req_") {
			t.Fatalf("%s: status %d headers %v: %s", tt.name, w.Code, w.Header(), w.Body)
		}
		st, err := parseStream(w.Body.Bytes())
		if err != nil {
			t.Fatalf("%s: %v\n%s", tt.name, err, w.Body)
		}
		if len(st.contents) != len(want.Choices) {
			t.Fatalf("%s: %d choices streamed, want %d", tt.name, len(st.contents), len(want.Choices))
		}
		for i, c := range want.Choices {
			if st.contents[i] != c.Message.Content || st.finish[i] != c.FinishReason {
				t.Errorf("%s: choice %d streamed %q (%s), want %q (%s)", tt.name, i, st.contents[i], st.finish[i], c.Message.Content, c.FinishReason)
			}
			if len(c.Message.Content) > deltaBytes && st.deltas[i] < 2 {
				t.Errorf("%s: choice %d came in %d deltas", tt.name, i, st.deltas[i])
			}
		}
		if (st.usage != nil) != tt.usage {
			t.Fatalf("%s: usage chunk %v, want %v", tt.name, st.usage != nil, tt.usage)
		}
		if tt.usage && st.usage.Usage != want.Usage {
			t.Errorf("%s: streamed usage %+v, want %+v", tt.name, st.usage.Usage, want.Usage)
		}
		if st.chunks[0].Model != "sim-1" {
			t.Errorf("%s: model %q", tt.name, st.chunks[0].Model)
		}
	}
}

// The raw bytes of a short stream, as OpenAI writes them.
func TestStreamBytes(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{})
	req := &chatRequest{Model: "m", includeUsage: true, promptTokens: 5}
	id := [24]byte([]byte("0123456789abcdef01234567"))
	cw := s.newChunkWriter(req, id)
	got := string(cw.appendStream(nil, 5, generated{choices: []choice{{content: "hi", finish: "stop"}}, completionTokens: 1}))
	head := `data: {"id":"chatcmpl-0123456789abcdef01234567","object":"chat.completion.chunk","created":`
	lines := strings.Split(got, "\n\n")
	wantTails := []string{
		`"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`"choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
		`"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`,
		`data: [DONE]`,
		``,
	}
	if len(lines) != len(wantTails) {
		t.Fatalf("%d events:\n%s", len(lines), got)
	}
	for i, want := range wantTails[:4] {
		if !strings.HasPrefix(lines[i], head) || !strings.HasSuffix(lines[i], `,"model":"m","service_tier":"default","system_fingerprint":"`+s.fingerprint+`",`+want) {
			t.Errorf("event %d:\n%s\nwant it to end\n%s", i, lines[i], want)
		}
	}
	if lines[4] != wantTails[4] {
		t.Errorf("last event %q", lines[4])
	}
}

// Faults come before the stream, as plain HTTP errors in OpenAI's shape;
// a bad stream request is a 400 like any other.
func TestStreamFaults(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 3)
	body := chatBody(t, in, in.Initial(), map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}})
	tests := []struct {
		name     string
		cfg      Config
		body     string
		hdr      []string
		status   int
		wantCode string
	}{
		{"forced 429", Config{}, body, []string{"X-Sim-Fault", "rate_limit"}, 429, "rate_limit_exceeded"},
		{"429 rate", Config{RateLimitRate: 1}, body, nil, 429, "rate_limit_exceeded"},
		{"forced 500", Config{}, body, []string{"X-Sim-Fault", "server_error"}, 500, ""},
		{"unknown model", Config{Models: []string{"other"}}, strings.Replace(body, `"model":"sim-1"`, `"model":"gpt-9"`, 1), nil, 404, "model_not_found"},
		{"n too large", Config{}, strings.Replace(body, `"stream":true`, `"stream":true,"n":17`, 1), nil, 400, "integer_above_max_value"},
		{"no key", Config{APIKey: "k"}, body, nil, 401, ""},
	}
	for _, tt := range tests {
		w := post(newServer(t, tt.cfg), tt.body, tt.hdr...)
		var e errorResponse
		if w.Code != tt.status || w.Header().Get("Content-Type") != "application/json" || json.Unmarshal(w.Body.Bytes(), &e) != nil ||
			e.Error.Message == "" || deref(e.Error.Code) != tt.wantCode {
			t.Errorf("%s: %d %s %s", tt.name, w.Code, w.Header().Get("Content-Type"), w.Body)
		}
	}
}

// Latency delays the stream's first byte; a client that leaves during it
// is counted canceled, not answered.
func TestStreamLatencyAndCancel(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 3)
	body := chatBody(t, in, in.Initial(), map[string]any{"stream": true})
	s := newServer(t, Config{Latency: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.ServeHTTP(w, r)
	}()
	cancel()
	<-done
	if st := s.Stats(); st.Canceled != 1 || st.Completions != 0 || w.Body.Len() != 0 {
		t.Errorf("stats %+v, body %q", st, w.Body)
	}
}

// The first chunk is flushed before the rest is written.
func TestStreamFlushesFirstChunk(t *testing.T) {
	t.Parallel()
	in := mustInstance(t, 3)
	s := newServer(t, Config{Accuracy: 1})
	fw := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody(t, in, in.Initial(), map[string]any{"stream": true})))
	s.ServeHTTP(fw, r)
	if fw.atFlush == "" || strings.Count(fw.atFlush, "\n\n") != 1 || !strings.Contains(fw.atFlush, `"role":"assistant"`) {
		t.Errorf("flushed %q", fw.atFlush)
	}
	if _, err := parseStream(fw.Body.Bytes()); err != nil {
		t.Error(err)
	}
}

type flushRecorder struct {
	*httptest.ResponseRecorder
	atFlush string
}

func (f *flushRecorder) Flush() {
	if f.atFlush == "" {
		f.atFlush = f.Body.String()
	}
	f.ResponseRecorder.Flush()
}
