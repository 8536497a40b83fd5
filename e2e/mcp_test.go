package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// `maker mcp` as an agent runs it: a child process speaking MCP on
// stdin/stdout, called by the official SDK's client.
func TestMCPOverStdio(t *testing.T) {
	t.Parallel()
	natsURL := startJudgeEnv(t)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "main.go"), []byte("package main\n\nfunc main() { panic(\"boom\") }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(makerBin, "mcp", "--nats", natsURL, "--root", root, "--session", "mcp-e2e")
	cmd.Env = childEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cs.Close(); err != nil && !strings.Contains(err.Error(), "signal") {
			t.Errorf("close: %v (stderr %s)", err, stderr.String())
		}
	}()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "break_glass", Arguments: map[string]any{
		"problem":       "break glass: main panics with boom",
		"context_files": []string{"main.go"},
		"tried":         map[string]string{"local_model": "no", "frontier_model": "no", "tools": "no"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The text is the answer as pure JSON (and the same object as the
	// structured content).
	text := res.Content[0].(*mcp.TextContent).Text
	var answer struct{ Outcome, Session string }
	if err := json.Unmarshal([]byte(text), &answer); err != nil || res.IsError || answer.Outcome != "answered" || answer.Session != "mcp-e2e" {
		t.Errorf("tool result (error %v, %v): %s", res.IsError, err, text)
	}
	if res.StructuredContent == nil {
		t.Error("no structured content")
	}
}
