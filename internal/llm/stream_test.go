package llm

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// sse joins chunk objects (JSON text without the "data: " prefix) into an
// event stream; done adds the closing [DONE].
func sse(done bool, chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	if done {
		b.WriteString("data: [DONE]\n\n")
	}
	return b.String()
}

func chunk(index int, delta, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"served-model","choices":[{"index":` +
		strconv.Itoa(index) + `,"delta":` + delta + `,"finish_reason":` + f + `}]}`
}

const (
	roleDelta  = `{"role":"assistant","content":""}`
	usageChunk = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"served-model","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`
)

func content(s string) string { return `{"content":"` + s + `"}` }

var goodStream = sse(true, chunk(0, roleDelta, ""), chunk(0, content("hello "), ""), chunk(0, content("world"), ""), chunk(0, `{}`, "stop"), usageChunk)

// A streaming client joins the chunks into the Response a plain call
// returns, and every failure takes the plain call's path (retry.go).
func TestCompleteStream(t *testing.T) {
	t.Parallel()
	stream := func(body string) reply { return reply{status: 200, body: body} }
	tests := []struct {
		name       string
		replies    []reply
		want       []Choice
		wantUsage  [2]int
		wantTries  int
		wantErr    error
		wantStatus int
	}{
		{"joined", []reply{stream(goodStream)}, []Choice{{"hello world", "stop"}}, [2]int{11, 7}, 1, nil, 0},
		{"two choices interleaved", []reply{stream(sse(true, chunk(1, roleDelta, ""), chunk(0, roleDelta, ""), chunk(1, content("b"), ""),
			chunk(0, content("a"), ""), chunk(0, `{}`, "length"), chunk(1, `{}`, "stop"), usageChunk))},
			[]Choice{{"a", "length"}, {"b", "stop"}}, [2]int{11, 7}, 1, nil, 0},
		// Estimated: "hello" is 5 bytes, 2 tokens; "x" 1 (stream_bound_test.go).
		{"no usage chunk", []reply{stream(sse(true, chunk(0, content("x"), "stop")))}, []Choice{{"x", "stop"}}, [2]int{2, 1}, 1, nil, 0},
		{"no [DONE]", []reply{stream(sse(false, chunk(0, content("x"), "stop"), usageChunk))}, []Choice{{"x", "stop"}}, [2]int{11, 7}, 1, nil, 0},
		{"429 before the stream, then a stream", []reply{errReply(429, "rate_limit_exceeded", "requests", "slow down"), stream(goodStream)},
			[]Choice{{"hello world", "stop"}}, [2]int{11, 7}, 2, nil, 0},
		{"connection cut mid-stream, then a stream", []reply{{status: 200, body: sse(false, chunk(0, content("hel"), "")), cut: true}, stream(goodStream)},
			[]Choice{{"hello world", "stop"}}, [2]int{11, 7}, 2, nil, 0},
		{"error event mid-stream, then a stream", []reply{stream(sse(false, chunk(0, content("hel"), ""), `{"error":{"message":"overloaded","type":"server_error","code":null}}`)), stream(goodStream)},
			[]Choice{{"hello world", "stop"}}, [2]int{11, 7}, 2, nil, 0},
		{"404 unknown model", []reply{errReply(404, "model_not_found", "invalid_request_error", "The model `x` does not exist or you do not have access to it.")},
			nil, [2]int{}, 1, ErrPermanent, 404},
		{"chunk not JSON", []reply{stream("data: {not json\n\n")}, nil, [2]int{}, 3, ErrBadResponse, 200},
		{"no finish_reason", []reply{stream(sse(true, chunk(0, content("x"), "")))}, nil, [2]int{}, 3, ErrBadResponse, 200},
		{"no choices", []reply{stream(sse(true, usageChunk))}, nil, [2]int{}, 3, ErrBadResponse, 200},
		{"usage out of range", []reply{stream(sse(true, chunk(0, content("x"), "stop"),
			`{"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":-1,"completion_tokens":7,"total_tokens":6}}`))},
			nil, [2]int{}, 3, ErrBadResponse, 200},
		{"choice index too large", []reply{stream(sse(true, strings.Replace(chunk(0, content("x"), "stop"), `"index":0`, `"index":500`, 1)))},
			nil, [2]int{}, 3, ErrBadResponse, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, tt.replies...)
			c, _ := testClient(t, f.srv.URL, func(cfg *Config) { cfg.Stream = true })
			req := hello
			req.Temperature = 0.1
			res, err := c.Complete(context.Background(), req)
			if res.Attempts != tt.wantTries {
				t.Errorf("attempts %d, want %d (err %v)", res.Attempts, tt.wantTries, err)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || HTTPStatus(err) != tt.wantStatus {
					t.Fatalf("error %v (status %d), want %v (status %d)", err, HTTPStatus(err), tt.wantErr, tt.wantStatus)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Choices) != len(tt.want) {
				t.Fatalf("choices %+v, want %+v", res.Choices, tt.want)
			}
			for i := range tt.want {
				if res.Choices[i] != tt.want[i] {
					t.Errorf("choice %d %+v, want %+v", i, res.Choices[i], tt.want[i])
				}
			}
			if got := [2]int{res.PromptTokens, res.CompletionTokens}; got != tt.wantUsage || res.Model != "served-model" {
				t.Errorf("usage %v model %q, want %v", got, res.Model, tt.wantUsage)
			}
			raw := string(f.last().raw)
			for _, want := range []string{`"stream":true`, `"stream_options":{"include_usage":true}`, `"temperature":0.1`} {
				if !strings.Contains(raw, want) {
					t.Errorf("request body lacks %s: %s", want, raw)
				}
			}
		})
	}
}

// Without Stream nothing about streaming is sent.
func TestCompleteNoStreamByDefault(t *testing.T) {
	t.Parallel()
	f := newFake(t, okReply("x"))
	c, _ := testClient(t, f.srv.URL, nil)
	if _, err := c.Complete(context.Background(), hello); err != nil {
		t.Fatal(err)
	}
	if raw := string(f.last().raw); strings.Contains(raw, `"stream":true`) || strings.Contains(raw, "stream_options") {
		t.Errorf("request body %s", raw)
	}
}
