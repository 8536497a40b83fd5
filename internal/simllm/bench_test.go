package simllm

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkChatCompletion measures the handler alone on a 10-disk prompt,
// the load a fleet benchmark puts on it with zero latency.
func BenchmarkChatCompletion(b *testing.B) {
	for _, bc := range []struct {
		name  string
		extra map[string]any
	}{
		{"plain", nil},
		{"stream", map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchChat(b, bc.extra) })
	}
}

func benchChat(b *testing.B, extra map[string]any) {
	s := newServer(b, Config{MalformedRate: 0.02, OverlongRate: 0.01})
	in := mustInstance(b, 10)
	states := walk(b, in, 32)
	bodies := make([][]byte, len(states))
	for i, st := range states {
		fields := map[string]any{"temperature": 0.1, "seed": i, "max_tokens": 750}
		for k, v := range extra {
			fields[k] = v
		}
		bodies[i] = []byte(chatBody(b, in, st, fields))
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(bodies[i%len(bodies)]))
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d", w.Code)
			}
			i++
		}
	})
}
