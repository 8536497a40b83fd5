package simllm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/task/hanoi"
)

const nodeHint = "the official OpenAI client check needs Node >= 20 and its package: npm ci --prefix internal/simllm/testdata/npm"

// needNode skips (or, with MAKER_REQUIRE_NODE=1, fails) when the Node
// check cannot run.
func needNode(t *testing.T, why string) {
	t.Helper()
	msg := why + "; " + nodeHint
	if os.Getenv("MAKER_REQUIRE_NODE") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// TestOfficialOpenAINodeClient runs testdata/npm/check.mjs, which drives
// the server with the official openai npm package: models, a completion,
// the same completion streamed with include_usage (chunks, usage, the raw
// events ending data: [DONE], the SDK's stream helper), an unknown model
// (NotFoundError, streamed or not), forced 429 (with and without retries),
// 500, 400 and 401.
func TestOfficialOpenAINodeClient(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		needNode(t, "node not found on PATH")
	}
	dir := filepath.Join("testdata", "npm")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		needNode(t, "testdata/npm/node_modules/openai is missing")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const key = "sk-sim-node-check"
	rn, err := Start(ctx, "127.0.0.1:0", Config{Accuracy: 1, APIKey: key, RetryAfter: 20 * time.Millisecond, Models: []string{DefaultModel}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rn.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()

	in := mustInstance(t, 3)
	msgs := mustJSON(t, messages(t, in, in.Initial()))
	want := "move = [1, 0, 2]\nnext_state = [[3, 2], [], [1]]"
	cmd := exec.CommandContext(ctx, node, "check.mjs", rn.URL(), msgs, want)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SIM_API_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node check.mjs: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != "ok" {
		t.Errorf("node output: %s", out)
	}
	st := rn.Stats()
	if st.RateLimited != 3 || st.ServerErrors != 1 || st.BadRequests != 1 || st.Completions != 5 || st.UnknownModels != 2 {
		t.Errorf("server saw %+v; want 3 rate limited (1 + 2 retried), 1 server error, 1 bad request, 5 completions (2 streamed), 2 unknown models", st)
	}
	if _, err := hanoi.ParseAnswer(want, 3); err != nil {
		t.Fatal(err)
	}
}
