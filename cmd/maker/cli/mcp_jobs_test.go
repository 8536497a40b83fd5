package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	mcpserver "github.com/makerfleet/makerfleet/internal/app/mcp"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestMCPJobTools: submit_job, job_status and job_result called by an MCP
// client of the official SDK, over in-memory transports, against a fleet
// on a real NATS; their input schemas have no null unions, their results
// are JSON text equal to their structured content.
func TestMCPJobTools(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	env.StartCoordinator(coordinator.Config{})
	jc, err := client.New(env.NC, client.WithTenant("acme"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcpserver.New(mcpserver.Config{Jobs: &natsClient{c: jc, nc: env.NC}, Tenant: "acme", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkToolSchemas(t, tools.Tools)
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		schema, _ := json.Marshal(tool.InputSchema)
		if tool.Name == "submit_job" && !strings.Contains(string(schema), `"required":["task","params"]`) {
			t.Errorf("submit_job schema: %s", schema)
		}
	}
	if got := strings.Join(names, " "); got != "break_glass job_result job_status submit_job" {
		t.Fatalf("tools %q", got)
	}
	call := toolCaller(t, cs)

	isErr, text := call("submit_job", map[string]any{"task": "hanoi", "params": map[string]any{"disks": 3}, "k": 1, "job_id": "mcp-1"})
	var sub client.Submitted
	if isErr || json.Unmarshal([]byte(text), &sub) != nil || sub.JobID != "mcp-1" || sub.Tenant != "acme" {
		t.Fatalf("submit_job: %v %s", isErr, text)
	}
	// No voter yet: the job cannot finish.
	if isErr, text := call("job_result", map[string]any{"job_id": "mcp-1"}); !isErr || !strings.HasPrefix(text, "not finished: ") {
		t.Errorf("job_result of a running job: %v %s", isErr, text)
	}
	var status schemas.JobStatus
	if isErr, text := call("job_status", map[string]any{"job_id": "mcp-1"}); isErr || json.Unmarshal([]byte(text), &status) != nil || status.JobID != "mcp-1" {
		t.Errorf("job_status: %v %s", isErr, text)
	}
	env.StartVoter(fleettest.NewFakeModel(nil, nil), voter.Config{Concurrency: 4})
	if _, err := jc.Wait(ctx, "mcp-1", nil); err != nil {
		t.Fatal(err)
	}
	var rep schemas.JobReport
	if isErr, text := call("job_result", map[string]any{"job_id": "mcp-1"}); isErr || json.Unmarshal([]byte(text), &rep) != nil || !rep.Solved || rep.Steps != 7 {
		t.Errorf("job_result: %v %s", isErr, text)
	}

	checkJobToolRefusals(t, call)
}

// toolCaller calls tools of cs: whether the result is a tool error, and
// its text (the JSON of its structured content when it is not).
func toolCaller(t *testing.T, cs *mcp.ClientSession) func(name string, args map[string]any) (bool, string) {
	return func(name string, args map[string]any) (bool, string) {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError {
			checkStructured(t, res)
		}
		return res.IsError, textOf(res)
	}
}

// checkJobToolRefusals: the job tools refuse, as tool errors saying why,
// an invalid job, an unknown task, a job id taken by another job (mcp-1,
// submitted before), an unknown job and a malformed id.
func checkJobToolRefusals(t *testing.T, call func(name string, args map[string]any) (bool, string)) {
	t.Helper()
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"submit_job", map[string]any{"task": "hanoi", "params": map[string]any{"disks": 3}, "k": -1}, "invalid job: "},
		{"submit_job", map[string]any{"task": "nope", "params": map[string]any{}, "k": 1}, "invalid job: "},
		{"submit_job", map[string]any{"task": "hanoi", "params": map[string]any{"disks": 4}, "k": 1, "job_id": "mcp-1"}, "invalid job: "},
		{"job_status", map[string]any{"job_id": "nope"}, "unknown job: "},
		{"job_result", map[string]any{"job_id": "a b"}, "invalid job: "},
	} {
		if isErr, text := call(tc.tool, tc.args); !isErr || !strings.HasPrefix(text, tc.want) {
			t.Errorf("%s %v: %v %q; want a tool error starting %q", tc.tool, tc.args, isErr, text, tc.want)
		}
	}
}
