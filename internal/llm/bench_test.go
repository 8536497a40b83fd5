package llm

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkComplete measures the client's own cost per call (body rewrite,
// go-openai, net/http, JSON) against a local server that answers at once.
func BenchmarkComplete(b *testing.B) {
	body := okBody("move = [1, 0, 2]\nnext_state = [[3, 2], [], [1]]")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL + "/v1", Model: "bench", APIKey: "k"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	seed := int64(7)
	req := Request{
		Messages: []Message{
			{Role: "system", Content: strings.Repeat("Strategy and rules for the Towers of Hanoi. ", 50)},
			{Role: "user", Content: "previous move = [2, 0, 1]\ncurrent state = [[3], [2], [1]]"},
		},
		Temperature: 0.1, MaxTokens: 750, Seed: &seed,
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Complete(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSetTemperature isolates the body rewrite that fixes temperature 0.
func BenchmarkSetTemperature(b *testing.B) {
	raw := []byte(`{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat("rules ", 400) +
		`"},{"role":"user","content":"state"}],"max_tokens":750,"n":1,"stream":false,"seed":7}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := setTemperature(raw, 0.1); err != nil {
			b.Fatal(err)
		}
	}
}
