package simllm_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
)

// TestPromptCache: a prompt repeating a prefix of at least 1,024 tokens
// has it served from the cache on the second call, in 128-token blocks,
// and the model client reads the figure (streamed or not); a shorter
// prefix, or a new one, is not cached; n choices bill the prompt once.
func TestPromptCache(t *testing.T) {
	t.Parallel()
	s, err := simllm.New(simllm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	ctx := context.Background()
	long := strings.Repeat("Follow the strategy exactly. ", 200) // 5,800 bytes: 1,450 tokens
	ask := func(stream bool, system, user string, n int) llm.Response {
		t.Helper()
		c, err := llm.New(llm.Config{BaseURL: ts.URL + "/v1", Model: "sim-1", Stream: stream, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		resp, err := c.Complete(ctx, llm.Request{Messages: []llm.Message{{Role: "system", Content: system}, {Role: "user", Content: user}},
			Temperature: 0.1, MaxTokens: 50, N: n})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := ask(false, long, "step 1", 1)
	if first.CachedPromptTokens != 0 {
		t.Errorf("first call: %d cached, want 0", first.CachedPromptTokens)
	}
	prefix := (len(long)+3)/4 + 4
	want := prefix / 128 * 128
	for _, stream := range []bool{false, true} {
		again := ask(stream, long, "step 2", 3)
		if again.CachedPromptTokens != want || again.PromptTokens != first.PromptTokens {
			t.Errorf("repeated prefix (stream %v): %d of %d prompt tokens cached, want %d of %d", stream, again.CachedPromptTokens, again.PromptTokens, want, first.PromptTokens)
		}
	}
	if r := ask(false, "Short instructions.", "step 1", 1); r.CachedPromptTokens != 0 {
		t.Errorf("short prefix: %d cached", r.CachedPromptTokens)
	}
	if r := ask(false, long+" And one more thing.", "step 1", 1); r.CachedPromptTokens != 0 {
		t.Errorf("a new prefix: %d cached", r.CachedPromptTokens)
	}
	if st := s.Stats(); st.CachedTokens != int64(2*want) {
		t.Errorf("stats: %d cached tokens, want %d", st.CachedTokens, 2*want)
	}
}
