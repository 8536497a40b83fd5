package simllm

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type chatResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string          `json:"finish_reason"`
		Logprobs     json.RawMessage `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	SystemFingerprint string `json:"system_fingerprint"`
}

type errorResponse struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func newServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// post sends body to the chat endpoint; hdr is name, value pairs.
func post(s http.Handler, body string, hdr ...string) *httptest.ResponseRecorder {
	return do(s, http.MethodPost, "/v1/chat/completions", body, hdr...)
}

func do(s http.Handler, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, bytes.NewBufferString(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// messages turns a task prompt into chat messages.
func messages(t testing.TB, in *hanoi.Instance, s task.State) []map[string]string {
	t.Helper()
	msgs, err := in.Prompt(s)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]map[string]string, len(msgs))
	for i, m := range msgs {
		out[i] = map[string]string{"role": m.Role, "content": m.Content}
	}
	return out
}

// chatBody is a request for the prompt of s, plus extra fields.
func chatBody(t testing.TB, in *hanoi.Instance, s task.State, extra map[string]any) string {
	t.Helper()
	body := map[string]any{"model": "sim-1", "messages": messages(t, in, s)}
	for k, v := range extra {
		body[k] = v
	}
	return mustJSON(t, body)
}

func mustChat(t testing.TB, s http.Handler, body string, hdr ...string) chatResponse {
	t.Helper()
	w := post(s, body, hdr...)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var resp chatResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatalf("decode response: %v\n%s", err, w.Body)
	}
	return resp
}

func mustInstance(t testing.TB, n int) *hanoi.Instance {
	t.Helper()
	in, err := hanoi.New(n)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// walk returns the first limit states of the solution for in (all of them
// when limit exceeds the step count), following the strategy.
func walk(t testing.TB, in *hanoi.Instance, limit int) []task.State {
	t.Helper()
	s := in.Initial()
	out := []task.State{s}
	for len(out) < limit && !in.Done(s) {
		st, err := in.DecodeState(s)
		if err != nil {
			t.Fatal(err)
		}
		m, err := hanoi.StrategyMove(st.Pegs, st.Prev, in.Disks())
		if err != nil {
			t.Fatal(err)
		}
		next, err := hanoi.Apply(st.Pegs, m)
		if err != nil {
			t.Fatal(err)
		}
		s, err = in.Next(s, task.Vote{Key: hanoi.Answer{Move: m, NextState: next}.Key()})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if in.Done(out[len(out)-1]) {
		out = out[:len(out)-1] // the goal has no next move
	}
	return out
}

// texts returns the message texts of the prompt for s.
func texts(t testing.TB, in *hanoi.Instance, s task.State) []string {
	t.Helper()
	msgs, err := in.Prompt(s)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Content
	}
	return out
}
