package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit/judgetest"
	"github.com/makerfleet/makerfleet/schemas"
)

// The break_glass tool called by an MCP client of the official SDK, over
// in-memory transports, against a judge on a real NATS and the simulated
// model.
func TestMCPBreakGlassTool(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "main.go"), []byte("package main\n\nfunc main() { panic(\"boom\") }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ".env"), []byte("OPENAI_API_KEY=sk-"+strings.Repeat("x1Y2", 8)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := newMCPServer(&mcpServer{js: env.JS, ns: bus.DefaultNamespace, root: root, session: "mcp-s", tenant: "acme",
		requester: "agent-7", timeout: judgetest.Timeout})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), judgetest.Timeout)
	defer cancel()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil)
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "break_glass" {
		t.Fatalf("tools %+v, %v", tools, err)
	}
	schema, _ := json.Marshal(tools.Tools[0].InputSchema)
	for _, want := range []string{`"problem"`, `"context_files"`, `"problem_type"`, `"budget"`, `"lean_proof"`, `"required":["problem"]`} {
		if !strings.Contains(string(schema), want) {
			t.Errorf("input schema lacks %s: %s", want, schema)
		}
	}

	call := func(args map[string]any) (*mcp.CallToolResult, string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "break_glass", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		return res, text.String()
	}
	tried := map[string]any{"local_model": "hermes: no", "frontier_model": "opus: no", "tools": "go vet: nothing"}
	res, text := call(map[string]any{"problem": "break glass: main panics with boom", "context_files": []string{"main.go", ".env"},
		"problem_type": "code_bug", "budget": 0.5, "tried": tried})
	if res.IsError {
		t.Fatalf("tool error: %s", text)
	}
	var resp schemas.BreakGlassResponse
	if err := json.Unmarshal([]byte(text[strings.Index(text, "{"):]), &resp); err != nil {
		t.Fatalf("answer is not a response: %v\n%s", err, text)
	}
	if resp.Outcome != schemas.BreakGlassAnswered || resp.TypeSource != "request" || resp.Cost.BudgetUSD != 0.5 || resp.Session != "mcp-s" {
		t.Errorf("response %+v", resp)
	}
	if !strings.Contains(text, "note: withheld .env") || len(resp.ExcludedFiles) != 1 {
		t.Errorf("the .env was not withheld visibly: %s", text)
	}
	if strings.Contains(env.Requests.String(), "x1Y2x1Y2") {
		t.Error("the key reached a model")
	}

	// Without the prior attempts the judge refuses: a tool error with the
	// reason, not a protocol error.
	res, text = call(map[string]any{"problem": "break glass: main panics"})
	if !res.IsError || !strings.Contains(text, "prior attempts missing") {
		t.Errorf("refusal: %v %s", res.IsError, text)
	}
	res, text = call(map[string]any{"problem": "break glass: x", "problem_type": "poetry", "tried": tried})
	if !res.IsError || !strings.Contains(text, "problem_type") {
		t.Errorf("bad type: %v %s", res.IsError, text)
	}
	recs := env.Audit("mcp-s")
	if len(recs) != 2 || recs[0].Requester != "agent-7" {
		t.Errorf("audit %v", judgetest.Outcomes(recs))
	}
}
