package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
)

const mcpNodeDir = "testdata/mcp-npm"

// needMCPNode returns node, or skips (with MAKER_REQUIRE_NODE=1, fails)
// when the official MCP clients cannot run.
func needMCPNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	why := "node not found on PATH"
	if err == nil {
		why = ""
		for _, pkg := range []string{"@modelcontextprotocol/sdk", "@modelcontextprotocol/inspector"} {
			if _, err := os.Stat(filepath.Join(mcpNodeDir, "node_modules", pkg, "package.json")); err != nil {
				why = mcpNodeDir + "/node_modules/" + pkg + " is missing"
			}
		}
	}
	if why == "" {
		return node
	}
	msg := why + "; the official MCP client checks need Node >= 20 and their packages: npm ci --prefix cmd/maker/cli/" + mcpNodeDir
	if os.Getenv("MAKER_REQUIRE_NODE") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// buildMakerBinary builds cmd/maker into a temporary directory.
func buildMakerBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command builds the binary under test: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "maker")
	cmd := exec.Command(goTool, "build", "-o", bin, "github.com/makerfleet/makerfleet/cmd/maker")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestMCPOfficialClients runs the built maker mcp under the official
// clients, against a judge on a real NATS whose panel (the simulated model,
// slowed down) takes longer than the client's request timeout:
//   - the MCP TypeScript SDK client (testdata/mcp-npm/check.mjs): plain
//     input schemas, an output schema on every tool, a call that times out
//     without progress and lives with resetTimeoutOnProgress, its text
//     JSON.parse'd equal to its structuredContent (which the SDK checks
//     against the output schema), a retried request id answered from the
//     first call;
//   - the MCP Inspector CLI: tools/list with --strict (no portability
//     error), tools/call with an object (tried) and an array
//     (context_files) given as --tool-arg key=JSON.
//
// The panel is paid once per request id: three requests, three panels.
func TestMCPOfficialClients(t *testing.T) {
	t.Parallel()
	node := needMCPNode(t)
	bin := buildMakerBinary(t)
	const latency = 800 * time.Millisecond // a panel round, then the judge: > 1.6 s a call
	env := judgetest.Start(t, simllm.Config{Latency: latency})
	env.StartJudge(judgetest.TestSettings())
	root := t.TempDir()
	writeRootFile(t, filepath.Join(root, "main.go"), "package main\n\nfunc main() { panic(\"boom\") }\n")
	writeRootFile(t, filepath.Join(root, ".env"), "OPENAI_API_KEY=sk-"+strings.Repeat("x1Y2", 8)+"\n")
	ctx, cancel := context.WithTimeout(t.Context(), 3*judgetest.Timeout)
	defer cancel()
	run := func(name string, args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, node, args...)
		cmd.Dir = mcpNodeDir
		cmd.Env = append(os.Environ(), "MAKER_BIN="+bin, "MAKER_NATS_URL="+env.NATS.URL, "MCP_ROOT="+root, "MCP_TIMEOUT_MS=1000")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		out, err := cmd.Output()
		t.Logf("%s: %s\n%s", name, time.Since(start).Round(time.Millisecond), clipText(stderr.String(), 2000))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		return out
	}

	out := run("TypeScript SDK client", "check.mjs")
	var got struct {
		OK       bool   `json:"ok"`
		Progress int    `json:"progress"`
		Elapsed  int    `json:"elapsed_ms"`
		Message  string `json:"message"`
	}
	if err := json.Unmarshal(lastLine(out), &got); err != nil || !got.OK {
		t.Fatalf("check.mjs: %v\n%s", err, out)
	}
	t.Logf("TypeScript SDK: %d progress notifications over %d ms, the last %q", got.Progress, got.Elapsed, got.Message)

	// The inspector starts the server with its own environment: the NATS
	// URL goes on the command line.
	inspector := []string{"node_modules/.bin/inspector", "--cli", bin, "mcp", "--nats", env.NATS.URL, "--root", root, "--tenant", "acme"}
	out = run("inspector tools/list", append(inspector, "--method", "tools/list", "--strict")...)
	var list struct {
		Tools []struct {
			Name         string          `json:"name"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(out, &list); err != nil || len(list.Tools) != 4 {
		t.Fatalf("inspector tools/list: %v\n%s", err, out)
	}
	for _, tool := range list.Tools {
		if strings.Contains(string(tool.InputSchema), "null") || len(tool.OutputSchema) == 0 {
			t.Errorf("%s: input schema %s, output schema %d bytes", tool.Name, tool.InputSchema, len(tool.OutputSchema))
		}
	}
	out = run("inspector tools/call", append(inspector, "--method", "tools/call", "--tool-name", "break_glass",
		"--tool-arg", "problem=break glass: main panics with boom",
		"--tool-arg", `tried={"local_model":"qwen: no","frontier_model":"opus: no","tools":"go vet: nothing"}`,
		"--tool-arg", `context_files=["main.go",".env"]`,
		"--tool-arg", "budget=0.5", "--tool-arg", "session=insp", "--tool-arg", "request_id=insp-1")...)
	var res struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		Structured schemas.BreakGlassResponse `json:"structuredContent"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("inspector tools/call: %v\n%s", err, out)
	}
	var text schemas.BreakGlassResponse
	if err := json.Unmarshal([]byte(res.Content[0].Text), &text); err != nil {
		t.Fatalf("the text is not JSON: %v\n%s", err, res.Content[0].Text)
	}
	if text.Outcome != schemas.BreakGlassAnswered || text.RequestID != "insp-1" || text.AnsweredAt != res.Structured.AnsweredAt ||
		len(text.ExcludedFiles) != 1 || text.ExcludedFiles[0].Path != ".env" {
		t.Errorf("inspector's answer: %+v", text)
	}

	// The request the TypeScript client gave up on still ran, once; asking
	// for it again joins it. Every request id was then paid for once.
	var tsTimeout schemas.BreakGlassResponse
	actx, acancel := context.WithTimeout(ctx, judgetest.Timeout)
	defer acancel()
	for judgeclient.Answer(actx, env.JS, bus.DefaultNamespace, "acme", "ts-timeout", &tsTimeout) != nil || !schemas.FinalBreakGlassOutcome(tsTimeout.Outcome) {
		select {
		case <-actx.Done():
			t.Fatal("ts-timeout was never answered")
		case <-time.After(50 * time.Millisecond):
		}
	}
	settings := judgetest.TestSettings()
	panels := len(settings.Panel(schemas.ProblemCodeBug)) + 1
	if st := env.Sim.Stats(); st.BreakGlass != int64(3*panels) {
		t.Errorf("the model answered %d panel and judge prompts; want %d (3 requests, each once)", st.BreakGlass, 3*panels)
	}
}

// writeRootFile writes a file of the server's root.
func writeRootFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func lastLine(b []byte) []byte {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return []byte(lines[len(lines)-1])
}
