package llm_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/makerfleet/makerfleet/internal/llm"
)

// TestCachedTokensBounded: what a server says it served from its prompt
// cache is read, and kept within [0, prompt_tokens] whatever it claims (a
// broken or hostile server cannot make a sample cheaper than free).
func TestCachedTokensBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cached string
		want   int
	}{{"7", 7}, {"999", 10}, {"-5", 0}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":` + tc.cached + `}}}`))
		}))
		c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "m", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: "user", Content: "x"}}})
		c.Close()
		srv.Close()
		if err != nil || resp.CachedPromptTokens != tc.want {
			t.Errorf("cached_tokens %s: %d, %v; want %d", tc.cached, resp.CachedPromptTokens, err, tc.want)
		}
	}
}
