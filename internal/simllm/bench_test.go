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
	s := newServer(b, Config{MalformedRate: 0.02, OverlongRate: 0.01})
	in := mustInstance(b, 10)
	states := walk(b, in, 32)
	bodies := make([][]byte, len(states))
	for i, st := range states {
		bodies[i] = []byte(chatBody(b, in, st, map[string]any{"temperature": 0.1, "seed": i, "max_tokens": 750}))
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
