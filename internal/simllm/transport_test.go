package simllm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTransportMatchesHTTP: a round trip in memory gets what the same
// request gets over a loopback socket: status, headers that matter, body.
func TestTransportMatchesHTTP(t *testing.T) {
	t.Parallel()
	cfg := Config{Accuracy: 0.9, Seed: 3, APIKey: "sk-test"}
	rn, err := Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rn.Close(context.Background()) })
	mem := &http.Client{Transport: newServer(t, cfg).Transport()}
	in := mustInstance(t, 4)
	body := chatBody(t, in, in.Initial(), map[string]any{"seed": 7, "temperature": 0.1})
	cases := []struct {
		name, method, path, key, body string
		status                        int
	}{
		{"completion", "POST", "/v1/chat/completions", "sk-test", body, 200},
		{"models", "GET", "/v1/models", "sk-test", "", 200},
		{"wrong key", "POST", "/v1/chat/completions", "sk-wrong", body, 401},
		{"bad json", "POST", "/v1/chat/completions", "sk-test", "{", 400},
		{"unknown path", "GET", "/v1/nope", "sk-test", "", 404},
	}
	for _, tc := range cases {
		get := func(c *http.Client, base string) (int, string, string) {
			req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tc.key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
		}
		hs, hct, hb := get(http.DefaultClient, "http://"+rn.Addr())
		ms, mct, mb := get(mem, "http://simllm.in-process")
		if hs != tc.status || ms != hs || mct != hct {
			t.Errorf("%s: status %d/%d (want %d), content type %q/%q", tc.name, hs, ms, tc.status, hct, mct)
		}
		if tc.name == "completion" {
			// ids and timestamps differ; the answer must not.
			if answer(t, hb) != answer(t, mb) {
				t.Errorf("%s: answers differ:\nhttp   %s\nmemory %s", tc.name, hb, mb)
			}
		}
	}
}

func answer(t *testing.T, body string) string {
	t.Helper()
	var r chatResponse
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(r.Choices) == 0 {
		t.Fatalf("no choices in %s", body)
	}
	return r.Choices[0].Message.Content
}

// TestTransportHonoursContext: a caller that gives up during the model's
// latency gets its context error, as over a socket.
func TestTransportHonoursContext(t *testing.T) {
	t.Parallel()
	srv := newServer(t, Config{Latency: time.Minute})
	in := mustInstance(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", "http://x/v1/chat/completions", strings.NewReader(chatBody(t, in, in.Initial(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = srv.Transport().RoundTrip(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("returned after %v", d)
	}
}
