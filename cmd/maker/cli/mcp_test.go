package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	mcpserver "github.com/makerfleet/makerfleet/internal/app/mcp"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
)

// The break_glass tool called by an MCP client of the official SDK, over
// in-memory transports, against a judge on a real NATS and the simulated
// model (slowed down, so that the call sends progress notifications).
func TestMCPBreakGlassTool(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{Latency: 100 * time.Millisecond})
	env.StartJudge(judgetest.TestSettings())
	root := t.TempDir()
	writeRootFile(t, filepath.Join(root, "main.go"), "package main\n\nfunc main() { panic(\"boom\") }\n")
	writeRootFile(t, filepath.Join(root, ".env"), "OPENAI_API_KEY=sk-"+strings.Repeat("x1Y2", 8)+"\n")
	progress := make(chan *mcp.ProgressNotificationParams, 1000)
	cs := connectMCP(t, mcpserver.Config{Judges: natsJudge{js: env.JS, ns: bus.DefaultNamespace, notes: io.Discard}, Root: root, Session: "mcp-s", Tenant: "acme",
		Requester: "agent-7", Timeout: judgetest.Timeout, ProgressEvery: 10 * time.Millisecond},
		&mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress <- r.Params }})

	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "break_glass" {
		t.Fatalf("tools %+v, %v", tools, err)
	}
	checkToolSchemas(t, tools.Tools)
	var in struct {
		Properties map[string]struct {
			Type    string           `json:"type"`
			Items   *json.RawMessage `json:"items"`
			Enum    []string         `json:"enum"`
			Pattern string           `json:"pattern"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	schema, _ := json.Marshal(tools.Tools[0].InputSchema)
	if err := json.Unmarshal(schema, &in); err != nil {
		t.Fatal(err)
	}
	p := in.Properties
	if p["problem"].Type != "string" || p["context_files"].Type != "array" || p["context_files"].Items == nil || p["tried"].Type != "object" ||
		p["budget"].Type != "number" || !slices.Contains(p["problem_type"].Enum, "lean_proof") || p["request_id"].Pattern == "" ||
		!slices.Equal(in.Required, []string{"problem"}) {
		t.Errorf("input schema: %s", schema)
	}

	tried := map[string]any{"local_model": "hermes: no", "frontier_model": "opus: no", "tools": "go vet: nothing"}
	params := &mcp.CallToolParams{Name: "break_glass", Arguments: map[string]any{"problem": "break glass: main panics with boom",
		"context_files": []string{"main.go", ".env"}, "problem_type": "code_bug", "budget": 0.5, "tried": tried}}
	params.SetProgressToken("call-1")
	res, resp := callBreakGlass(t, cs, params)
	if res.IsError {
		t.Fatalf("tool error: %+v", resp)
	}
	if resp.Outcome != schemas.BreakGlassAnswered || resp.TypeSource != "request" || resp.Cost.BudgetUSD != 0.5 || resp.Session != "mcp-s" {
		t.Errorf("response %+v", resp)
	}
	if len(resp.ExcludedFiles) != 1 || resp.ExcludedFiles[0].Path != ".env" {
		t.Errorf("the .env was not withheld visibly: %+v", resp.ExcludedFiles)
	}
	if strings.Contains(env.Requests.String(), "x1Y2x1Y2") {
		t.Error("the key reached a model")
	}
	// Progress: sent before the result, under the call's token, counting up.
	var last float64
	for n := len(progress); n > 0; n-- {
		p := <-progress
		if p.ProgressToken != "call-1" || p.Progress <= last || !strings.HasPrefix(p.Message, "break glass ") {
			t.Errorf("progress %+v after %v", p, last)
		}
		last = p.Progress
	}
	if last < 2 {
		t.Errorf("%v progress notifications; want the first and the panel's at least", last)
	}

	// Without the prior attempts the judge refuses: a tool error whose
	// text and structured content are the refusal, not a protocol error.
	res, resp = callBreakGlass(t, cs, &mcp.CallToolParams{Name: "break_glass", Arguments: map[string]any{"problem": "break glass: main panics"}})
	if !res.IsError || resp.Outcome != schemas.BreakGlassRefused || !strings.Contains(resp.Reason, "prior attempts missing") {
		t.Errorf("refusal: %v %+v", res.IsError, resp)
	}
	// Input the server refuses before asking: a plain-text tool error.
	for _, args := range []map[string]any{
		{"problem": "break glass: x", "problem_type": "poetry", "tried": tried},
		{"problem": "break glass: x", "tried": "local_model=no"},
		{"problem": "break glass: x", "context_files": "main.go"},
		{"problem": "break glass: x", "request_id": "a b"},
	} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "break_glass", Arguments: args})
		if err != nil || !res.IsError || res.StructuredContent != nil {
			t.Errorf("%v: %+v, %v; want a tool error", args, res, err)
		}
	}
	recs := env.Audit("mcp-s")
	if len(recs) != 2 || recs[0].Requester != "agent-7" {
		t.Errorf("audit %v", judgetest.Outcomes(recs))
	}
}

// TestMCPBreakGlassRequestID: a call retried with its request id, after
// the answer or while the first call runs, returns the first call's answer
// and does not run (or pay for) the panel again; the id belongs to its
// session.
func TestMCPBreakGlassRequestID(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{Latency: 50 * time.Millisecond})
	env.StartJudge(judgetest.TestSettings())
	root := t.TempDir()
	writeRootFile(t, filepath.Join(root, "main.go"), "package main\n")
	cs := connectMCP(t, mcpserver.Config{Judges: natsJudge{js: env.JS, ns: bus.DefaultNamespace, notes: io.Discard}, Root: root, Session: "s1", Tenant: "acme",
		Requester: "agent", Timeout: judgetest.Timeout}, nil)
	params := func(id string) *mcp.CallToolParams {
		return &mcp.CallToolParams{Name: "break_glass", Arguments: map[string]any{
			"problem": "break glass: main does nothing", "context_files": []string{"main.go"}, "request_id": id,
			"tried": map[string]any{"local_model": "no", "frontier_model": "no", "tools": "no"}}}
	}
	call := func(id string) schemas.BreakGlassResponse {
		_, r := callBreakGlass(t, cs, params(id))
		return r
	}
	first := call("retry-1")
	perCall := env.Sim.Stats().BreakGlass
	if first.Outcome != schemas.BreakGlassAnswered || first.RequestID != "retry-1" || perCall == 0 {
		t.Fatalf("first call: %+v, %d model calls", first, perCall)
	}
	again := call("retry-1")
	if again.AnsweredAt != first.AnsweredAt || again.Diagnosis != first.Diagnosis {
		t.Errorf("the retry got another answer: %+v", again)
	}
	// Two calls of one id at once: one panel.
	both := make(chan string, 2)
	for range 2 {
		go func() {
			res, err := cs.CallTool(t.Context(), params("retry-2"))
			if err != nil {
				both <- err.Error()
				return
			}
			both <- textOf(res)
		}()
	}
	var a, b schemas.BreakGlassResponse
	if err := errors.Join(json.Unmarshal([]byte(<-both), &a), json.Unmarshal([]byte(<-both), &b)); err != nil {
		t.Fatal(err)
	}
	if a.Outcome != schemas.BreakGlassAnswered || a.AnsweredAt != b.AnsweredAt {
		t.Errorf("concurrent calls: %+v and %+v", a, b)
	}
	if got := env.Sim.Stats().BreakGlass; got != 2*perCall {
		t.Errorf("model calls %d; want %d: two request ids, one panel each", got, 2*perCall)
	}
	other := params("retry-1")
	other.Arguments.(map[string]any)["session"] = "s2"
	if res, err := cs.CallTool(t.Context(), other); err != nil || !res.IsError || !strings.Contains(textOf(res), "another session") {
		t.Errorf("retry-1 from another session: %v %s", err, textOf(res))
	}
	if recs := env.Audit("s1"); len(recs) != 2 {
		t.Errorf("audit %v; want one record a request id", judgetest.Outcomes(recs))
	}
}

// connectMCP serves s to a new client over in-memory transports.
func connectMCP(t *testing.T, s mcpserver.Config, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	srv, err := mcpserver.New(s)
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, opts).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// callBreakGlass calls break_glass and returns its response, read from
// the text, which must be the JSON of the structured content.
func callBreakGlass(t *testing.T, cs *mcp.ClientSession, params *mcp.CallToolParams) (*mcp.CallToolResult, schemas.BreakGlassResponse) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	var resp schemas.BreakGlassResponse
	if err := json.Unmarshal([]byte(textOf(res)), &resp); err != nil {
		t.Fatalf("the text is not the response: %v\n%s", err, textOf(res))
	}
	checkStructured(t, res)
	return res, resp
}

// textOf joins a result's text contents.
func textOf(res *mcp.CallToolResult) string {
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return text.String()
}

// checkStructured checks that res's one content is a text holding
// exactly its structured content, as JSON.
func checkStructured(t *testing.T, res *mcp.CallToolResult) {
	t.Helper()
	if len(res.Content) != 1 || res.StructuredContent == nil {
		t.Fatalf("result: %d contents, structured %v", len(res.Content), res.StructuredContent)
	}
	var text any
	if err := json.Unmarshal([]byte(textOf(res)), &text); err != nil {
		t.Fatalf("the text is not JSON: %v", err)
	}
	structured, _ := json.Marshal(res.StructuredContent)
	var want any
	_ = json.Unmarshal(structured, &want)
	if !reflect.DeepEqual(text, want) {
		t.Errorf("text %s\nstructured %s", textOf(res), structured)
	}
}

// checkToolSchemas checks that every tool has an object output schema and
// an input schema without a type union or null, at any depth.
func checkToolSchemas(t *testing.T, tools []*mcp.Tool) {
	t.Helper()
	var walk func(name, path string, v any)
	walk = func(name, path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if typ, ok := v["type"]; ok {
				if s, isString := typ.(string); !isString || s == "null" {
					t.Errorf("%s: input schema %s.type is %v", name, path, typ)
				}
			}
			for k, e := range v {
				walk(name, path+"."+k, e)
			}
		case []any:
			for i, e := range v {
				walk(name, fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	for _, tool := range tools {
		var in, out map[string]any
		b, _ := json.Marshal(tool.InputSchema)
		_ = json.Unmarshal(b, &in)
		walk(tool.Name, "", in)
		b, _ = json.Marshal(tool.OutputSchema)
		if err := json.Unmarshal(b, &out); err != nil || out["type"] != "object" || out["properties"] == nil {
			t.Errorf("%s: output schema %s", tool.Name, b)
		}
	}
}

// TestBreakGlassSentWhole: a caller that gives up while its request is
// being sent (here: before Ask starts) still has it run, once; what was
// a request that might or might not be on the bus when an MCP client's
// timeout fired under load.
func TestBreakGlassSentWhole(t *testing.T) {
	t.Parallel()
	env := judgetest.Start(t, simllm.Config{})
	env.StartJudge(judgetest.TestSettings())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := judgetest.Request("given-up", "s1", "break glass: main panics with boom")
	if resp, err := (natsJudge{js: env.JS, ns: bus.DefaultNamespace, notes: io.Discard}).Ask(ctx, req, nil); resp != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Ask under an ended context: %+v, %v; want no answer and context.Canceled", resp, err)
	}
	actx, acancel := context.WithTimeout(t.Context(), judgetest.Timeout)
	defer acancel()
	var resp schemas.BreakGlassResponse
	for judgeclient.Answer(actx, env.JS, bus.DefaultNamespace, req.Tenant, req.RequestID, &resp) != nil || !schemas.FinalBreakGlassOutcome(resp.Outcome) {
		select {
		case <-actx.Done():
			t.Fatal("the request given up on was never answered: it was not sent")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if resp.Outcome != schemas.BreakGlassAnswered {
		t.Errorf("answer %+v", resp)
	}
}
