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

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // a poll interval, not a synchronisation guess
	}
}

func TestStartServesAndCloses(t *testing.T) {
	t.Parallel()
	if _, err := Start(t.Context(), "127.0.0.1:0", Config{Accuracy: 2}); err == nil {
		t.Error("Start accepted an invalid config")
	}
	if _, err := Start(t.Context(), "256.0.0.1:bad", Config{}); err == nil {
		t.Error("Start accepted a bad address")
	}

	rn, err := Start(t.Context(), "127.0.0.1:0", Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rn.URL(), "http://127.0.0.1:") || !strings.HasSuffix(rn.URL(), "/v1") || !strings.Contains(rn.URL(), rn.Addr()) {
		t.Errorf("URL %q Addr %q", rn.URL(), rn.Addr())
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}

	resp, err := hc.Get(rn.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"sim-1"`) {
		t.Errorf("models: %d %s", resp.StatusCode, b)
	}
	resp, err = hc.Post(rn.URL()+"/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || rn.Stats().Completions != 1 || rn.Server().Stats() != rn.Stats() {
		t.Errorf("chat: %d, stats %+v", resp.StatusCode, rn.Stats())
	}

	if err := rn.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := rn.Close(t.Context()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := hc.Get(rn.URL() + "/models"); err == nil {
		t.Error("server still answers after Close")
	}
}

// Latency ends early when the client leaves, and Close cuts off requests
// still waiting when its context ends.
func TestLatencyCancellation(t *testing.T) {
	t.Parallel()
	rn, err := Start(t.Context(), "127.0.0.1:0", Config{Latency: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	send := func(ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, "POST", rn.URL()+"/chat/completions", strings.NewReader(body))
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}
	go send(ctx)
	waitFor(t, "the request to arrive", func() bool { return rn.Stats().Requests == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("client error %v, want context.Canceled", err)
	}
	waitFor(t, "the server to notice the cancel", func() bool { return rn.Stats().Canceled == 1 })

	go send(context.Background())
	waitFor(t, "the second request to arrive", func() bool { return rn.Stats().Requests == 2 })
	closeCtx, closeCancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer closeCancel()
	if err := rn.Close(closeCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want DeadlineExceeded after cutting off the waiting request", err)
	}
	if err := <-done; err == nil {
		t.Error("cut-off request succeeded")
	}
	waitFor(t, "the cut-off handler to finish", func() bool { return rn.Stats().Canceled == 2 })

	var st Stats
	b, _ := json.Marshal(rn.Stats())
	_ = json.Unmarshal(b, &st)
	if st.Completions != 0 {
		t.Errorf("stats %+v", st)
	}
}
