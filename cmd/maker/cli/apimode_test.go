package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/client/httpapi"
	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	mcpserver "github.com/makerfleet/makerfleet/internal/app/mcp"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// apiFleetEnv is a test fleet with maker serve in front of it (run
// through Main, as main does) and keys of two tenants: acme's (a plain
// tenant key) and the admin's (tenant ops).
type apiFleetEnv struct {
	*fleettest.Env
	base, acme, admin string
	keys              *apikey.Store
}

func newAPIFleetEnv(t *testing.T) *apiFleetEnv {
	t.Helper()
	env := fleettest.New(t)
	a := &apiFleetEnv{Env: env, keys: apikey.New(env.Topo)}
	var err error
	if a.acme, _, err = a.keys.Create(t.Context(), apikey.CreateOptions{Tenant: "acme", Name: "acme-ci"}); err != nil {
		t.Fatal(err)
	}
	if a.admin, _, err = a.keys.Create(t.Context(), apikey.CreateOptions{Tenant: "ops", Admin: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"serve", "--nats", env.NATS.URL, "--redis", env.Redis().URL(), "--addr", "127.0.0.1:0",
			"--rate", "1000", "--burst", "1000"}, &out, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		<-code
	})
	fleettest.Eventually(t, 30*time.Second, func() bool {
		select {
		case c := <-code:
			code <- c
			t.Fatalf("serve exited %d: %s", c, errb.String())
		default:
		}
		m := listeningRE.FindStringSubmatch(errb.String())
		if m != nil {
			a.base = m[1]
		}
		return m != nil
	}, "serve never listened: %s", errb.String())
	return a
}

// api runs a command through the API with key.
func (a *apiFleetEnv) api(t *testing.T, key string, args ...string) outcome {
	t.Helper()
	return runMain(t, append(args, "--api", a.base, "--api-key", key)...)
}

// nats runs a command on the fleet's NATS (maker budget: its Redis).
func (a *apiFleetEnv) nats(t *testing.T, args ...string) outcome {
	t.Helper()
	if args[0] == "budget" {
		return runMain(t, append(args, "--redis", a.Redis().URL())...)
	}
	return runMain(t, append(args, "--nats", a.NATS.URL)...)
}

// same fails unless both runs succeeded with the same stdout.
func same(t *testing.T, what string, api, nats outcome) {
	t.Helper()
	if api.code != ExitOK || nats.code != ExitOK {
		t.Fatalf("%s: exit %d over the API (stderr %q), %d on NATS (stderr %q)", what, api.code, api.stderr, nats.code, nats.stderr)
	}
	if api.stdout != nats.stdout {
		t.Errorf("%s: the API prints\n%s\nNATS prints\n%s", what, api.stdout, nats.stdout)
	}
}

// startJudge runs a judge on the fleet's NATS answering from the
// simulated model, holding for a person's approval any call estimated
// over approvalUSD (0: the default).
func (a *apiFleetEnv) startJudge(t *testing.T, approvalUSD float64) {
	t.Helper()
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 1, Seed: 1})
	js, err := jetstream.New(a.Connect("judge"))
	if err != nil {
		t.Fatal(err)
	}
	settings := judgetest.TestSettings()
	settings.ApprovalUSD = approvalUSD
	judgetest.Serve(t, js, settings, sim.URL())
}

// TestAPIJobCommands: a tenant with only an API key submits through maker
// serve (maker submit --api --wait --json), follows and reads its job,
// lists its jobs, batches, task specs, budget and dead letters, and asks
// the judges' panel; every command prints what the NATS path prints for
// the same job (compared in the same test). maker mcp's tools work over
// the API as well.
func TestAPIJobCommands(t *testing.T) {
	t.Parallel()
	a := newAPIFleetEnv(t)
	// The fleet's prices: a job under a budget runs only priced work.
	a.SetPrice("", schemas.Pricing{InputUSDPerMTok: 1, OutputUSDPerMTok: 2})
	a.StartCoordinator(coordinator.Config{})
	a.StartVoter(fleettest.NewFakeModel(nil, nil), voter.Config{Concurrency: 4})
	a.startJudge(t, 0)

	// Submit and wait, with a budget (the budget's account).
	submit := []string{"submit", "--task", "hanoi", "--disks", "3", "--k", "1", "--job-id", "a1",
		"--input-price", "1", "--output-price", "2", "--budget-usd", "1"}
	res := a.api(t, a.acme, append(submit, "--wait", "--json")...)
	var rep schemas.JobReport
	if res.code != ExitOK || json.Unmarshal([]byte(res.stdout), &rep) != nil || !rep.Solved || rep.Tenant != "acme" || rep.JobID != "a1" {
		t.Fatalf("submit --api --wait --json: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if !strings.Contains(res.stderr, "submitted hanoi") || !strings.Contains(res.stderr, "job=acme/a1") {
		t.Errorf("submit --wait's notes: %q", res.stderr)
	}
	// The same job on NATS is a duplicate: the same report.
	same(t, "submit --wait --json", res, a.nats(t, append(submit, "--tenant", "acme", "--wait", "--json")...))
	same(t, "submit --json (a duplicate)", a.api(t, a.acme, append(submit, "--json")...), a.nats(t, append(submit, "--tenant", "acme", "--json")...))
	same(t, "submit --wait", a.api(t, a.acme, append(submit, "--wait", "-q")...), a.nats(t, append(submit, "--tenant", "acme", "--wait", "-q")...))

	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"result"}, {"result", "--json"}} {
		cmd := append([]string{args[0], "a1"}, args[1:]...)
		same(t, strings.Join(cmd, " "), a.api(t, a.acme, cmd...), a.nats(t, append([]string{args[0], "acme/a1"}, args[1:]...)...))
		// An admin key names the tenant.
		same(t, strings.Join(cmd, " ")+" (admin)", a.api(t, a.admin, append([]string{args[0], "acme/a1"}, args[1:]...)...),
			a.nats(t, append([]string{args[0], "acme/a1"}, args[1:]...)...))
	}
	// Another tenant's key finds nothing, even naming it (a plain key).
	if res := a.api(t, a.admin, "status", "a1"); res.code != ExitError || !strings.Contains(res.stderr, "(HTTP 404) (looked in the API key's tenant;") {
		t.Errorf("status a1 as tenant ops: exit %d, stderr %q; want not found", res.code, res.stderr)
	}
	plain, _, err := a.keys.Create(t.Context(), apikey.CreateOptions{Tenant: "beta"})
	if err != nil {
		t.Fatal(err)
	}
	// A new key reaches the server's key cache through its watch.
	fleettest.Eventually(t, 30*time.Second, func() bool { return a.api(t, plain, "jobs", "list").code == ExitOK },
		"the server never took beta's new key")
	if res := a.api(t, plain, "status", "acme/a1"); res.code != ExitError || !strings.Contains(res.stderr, "not found: no such job (HTTP 404)") {
		t.Errorf("beta's key naming acme/a1: exit %d, stderr %q; want no such job", res.code, res.stderr)
	}

	// Lists: the tenant's, and every tenant's with an admin key.
	a.nats(t, "submit", "--task", "hanoi", "--disks", "2", "--k", "1", "--job-id", "b1", "--tenant", "beta", "--wait", "-q")
	same(t, "jobs list --json", a.api(t, a.acme, "jobs", "list", "--json"), a.nats(t, "jobs", "list", "--tenant", "acme", "--json"))
	same(t, "jobs list", a.api(t, a.acme, "jobs", "list"), a.nats(t, "jobs", "list", "--tenant", "acme"))
	same(t, "jobs list --all-tenants", a.api(t, a.admin, "jobs", "list", "--all-tenants"), a.nats(t, "jobs", "list", "--all-tenants"))
	same(t, "jobs list --tenant beta (admin)", a.api(t, a.admin, "jobs", "list", "--tenant", "beta", "--json"), a.nats(t, "jobs", "list", "--tenant", "beta", "--json"))
	if res := a.api(t, a.acme, "jobs", "list", "--all-tenants"); res.code != ExitError || !strings.Contains(res.stderr, "forbidden: only an admin key acts on another tenant (HTTP 403)") {
		t.Errorf("jobs list --all-tenants with a tenant's key: exit %d, stderr %q", res.code, res.stderr)
	}

	// Budget: the job's account and the tenant's day.
	same(t, "budget show --job", a.api(t, a.acme, "budget", "show", "--job", "a1"), a.nats(t, "budget", "show", "--job", "acme/a1"))
	same(t, "budget show --job --json", a.api(t, a.acme, "budget", "show", "--job", "a1", "--json"),
		a.nats(t, "budget", "show", "--job", "acme/a1", "--json"))
	same(t, "budget show", a.api(t, a.acme, "budget", "show"), a.nats(t, "budget", "show", "--tenant", "acme"))
	res = a.api(t, a.acme, "budget", "set", "--job", "a1", "--usd", "3")
	if res.code != ExitUsage || !strings.Contains(res.stderr, "job finished: job a1 has finished (HTTP 409)") {
		t.Errorf("budget set of a finished job: exit %d, stderr %q; want refused (exit 2)", res.code, res.stderr)
	}
	if res := a.api(t, a.acme, "budget", "show", "--day", "2020-01-01"); res.code != ExitUsage || !strings.Contains(res.stderr, "today's spend") {
		t.Errorf("budget show --day over the API: exit %d, stderr %q", res.code, res.stderr)
	}

	// Task specs: registered by the operator, listed and shown to tenants,
	// and a tenant's job of one is checked here before it is sent.
	if res := a.nats(t, "task", "register", example("multiply.yaml"), "--by", "ops"); res.code != ExitOK {
		t.Fatalf("task register: %d %s", res.code, res.stderr)
	}
	same(t, "task list", a.api(t, a.acme, "task", "list"), a.nats(t, "task", "list"))
	same(t, "task list --json", a.api(t, a.acme, "task", "list", "--json"), a.nats(t, "task", "list", "--json"))
	same(t, "task show --json", a.api(t, a.acme, "task", "show", "multiply", "--json"), a.nats(t, "task", "show", "multiply", "--json"))
	same(t, "task show", a.api(t, a.acme, "task", "show", "multiply@1.0.0"), a.nats(t, "task", "show", "multiply@1.0.0"))
	res = a.api(t, a.acme, "submit", "--task", "multiply", "--params", `{"a":"12","b":"3"}`, "--k", "1", "--job-id", "m1", "--json")
	var sub client.Submitted
	if res.code != ExitOK || json.Unmarshal([]byte(res.stdout), &sub) != nil || sub != (client.Submitted{Tenant: "acme", JobID: "m1"}) {
		t.Errorf("submit of a task spec: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if res := a.api(t, a.acme, "submit", "--task", "multiply", "--params", `{"a":"x"}`, "--k", "1"); res.code != ExitUsage || res.stdout != "" {
		t.Errorf("an invalid job of a task spec: exit %d, stdout %q, stderr %q; want refused here", res.code, res.stdout, res.stderr)
	}
	if res := a.api(t, a.acme, "submit", "--task", "nope", "--k", "1"); res.code != ExitUsage || !strings.Contains(res.stderr, `unknown task "nope"`) {
		t.Errorf("an unknown task: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := a.api(t, a.acme, "cancel", "m1"); res.code != ExitOK && res.code != ExitUsage {
		t.Errorf("cancel m1: exit %d, stderr %q", res.code, res.stderr)
	}

	// Batches: submitted and waited for through the API (polling), read
	// on both paths.
	in, out, errs := batchFiles(t, t.TempDir())
	res = a.api(t, a.acme, "batch", "submit", in, "--wait", "--output", out, "--errors", errs, "--json")
	var batch schemas.BatchRecord
	if res.code != ExitOK || json.Unmarshal([]byte(res.stdout), &batch) != nil || batch.State != schemas.BatchCompleted ||
		batch.Tenant != "acme" || batch.Counts.Completed != 2 || batch.Counts.Failed != 1 {
		t.Fatalf("batch submit --api --wait: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	checkBatchFiles(t, out, errs, batch, res.stderr)
	same(t, "batch status", a.api(t, a.acme, "batch", "status", batch.ID), a.nats(t, "batch", "status", "acme/"+batch.ID))
	same(t, "batch status tenant/id", a.api(t, a.acme, "batch", "status", "acme/"+batch.ID, "--json"), a.nats(t, "batch", "status", "acme/"+batch.ID, "--json"))
	same(t, "batch output", a.api(t, a.acme, "batch", "output", batch.ID), a.nats(t, "batch", "output", "acme/"+batch.ID))
	same(t, "batch errors", a.api(t, a.acme, "batch", "errors", batch.ID), a.nats(t, "batch", "errors", "acme/"+batch.ID))
	same(t, "batch list", a.api(t, a.acme, "batch", "list"), a.nats(t, "batch", "list", "--tenant", "acme"))
	if data, _ := os.ReadFile(out); string(data) != a.nats(t, "batch", "output", "acme/"+batch.ID).stdout {
		t.Errorf("the --output file differs from batch output")
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"batch", "status", "beta/" + batch.ID}, ExitError, "no batch " + batch.ID + " in tenant beta"},
		{[]string{"batch", "cancel", "beta/" + batch.ID}, ExitError, "no batch " + batch.ID + " in tenant beta"},
		{[]string{"batch", "cancel", batch.ID}, ExitUsage, "(HTTP 409)"},
		{[]string{"batch", "list", "--tenant", "acme"}, ExitUsage, "--tenant cannot be given with --api"},
		{[]string{"batch", "submit", in, "--max-lines", "5"}, ExitUsage, "--max-lines cannot be given with --api"},
	} {
		if res := a.api(t, a.acme, tc.args...); res.code != tc.code || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d saying %q", tc.args, res.code, res.stderr, tc.code, tc.want)
		}
	}

	// Dead letters: the tenant's own.
	ctx := t.Context()
	subject := a.Topo.NS.SampleSubject("acme", "a1")
	dl := &schemas.DeadLetter{Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: a.Topo.NS.SamplesStream(), Seq: 1,
		Subject: subject, Consumer: bus.ConsumerVoters, Reason: "unreadable sample request", Deliveries: 1, Data: []byte("x"), At: time.Now().UTC()}
	if err := bus.PublishDeadLetter(ctx, a.Topo.JS, a.Topo.NS, dl); err != nil {
		t.Fatal(err)
	}
	same(t, "dlq list", a.api(t, a.acme, "dlq", "list"), a.nats(t, "dlq", "list", "--tenant", "acme"))
	same(t, "dlq list --json", a.api(t, a.acme, "dlq", "list", "--json", "--job", "a1"), a.nats(t, "dlq", "list", "--tenant", "acme", "--json", "--job", "a1"))
	same(t, "dlq list --all-tenants", a.api(t, a.admin, "dlq", "list", "--all-tenants", "--json"), a.nats(t, "dlq", "list", "--all-tenants", "--json"))
	if res := a.api(t, plain, "dlq", "list", "--json"); res.code != ExitOK || strings.TrimSpace(res.stdout) != "[]" {
		t.Errorf("beta's dead letters: exit %d, %q", res.code, res.stdout)
	}

	// Break glass: asked through the API as the key's tenant and holder,
	// the answer read on both paths.
	root := t.TempDir()
	writeRootFile(t, filepath.Join(root, "main.go"), "package main\n\nfunc main() { panic(\"boom\") }\n")
	bg := []string{"breakglass", "break glass: main panics with boom", "--tried", "local_model=qwen: no", "--tried", "frontier_model=opus: no",
		"--tried", "tools=go vet: nothing", "--file", "main.go", "--root", root, "--id", "bg-api-1", "--json"}
	res = a.api(t, a.acme, bg...)
	var resp schemas.BreakGlassResponse
	if res.code != ExitOK || json.Unmarshal([]byte(res.stdout), &resp) != nil || resp.Outcome != schemas.BreakGlassAnswered ||
		resp.Tenant != "acme" || resp.RequestID != "bg-api-1" {
		t.Fatalf("breakglass --api: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	same(t, "judge answer --json", a.api(t, a.acme, "judge", "answer", "bg-api-1", "--json"), a.nats(t, "judge", "answer", "bg-api-1", "--tenant", "acme", "--json"))
	same(t, "judge answer", a.api(t, a.acme, "judge", "answer", "bg-api-1"), a.nats(t, "judge", "answer", "bg-api-1", "--tenant", "acme"))
	for _, tc := range []struct {
		key  string
		args []string
		code int
		want string
	}{
		{a.acme, append(slices.Clone(bg), "--tenant", "acme"), ExitUsage, "--tenant cannot be given with --api"},
		{a.acme, append(slices.Clone(bg), "--requester", "mallory"), ExitUsage, "--requester cannot be given with --api"},
		{plain, []string{"judge", "answer", "bg-api-1"}, ExitError, "(HTTP 404)"},
		{a.acme, []string{"judge", "answer", "bg-api-1", "--tenant", "beta"}, ExitError, "no answer to bg-api-1 for tenant beta"},
	} {
		if res := a.api(t, tc.key, tc.args...); res.code != tc.code || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d saying %q", tc.args, res.code, res.stderr, tc.code, tc.want)
		}
	}

	// maker mcp's tools through the API.
	hc, err := httpapi.New(a.base, a.acme, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The tenant and requester are what maker mcp's flags default to; the
	// API takes both from the key.
	cs := connectMCP(t, mcpserver.Config{Judges: apiFleet{hc}, Jobs: apiFleet{hc}, Root: root, Session: "mcp-s", Tenant: schemas.DefaultTenant,
		Requester: "mcp-agent", Timeout: judgetest.Timeout}, nil)
	call := toolCaller(t, cs)
	isErr, text := call("submit_job", map[string]any{"task": "hanoi", "params": map[string]any{"disks": 3}, "k": 1, "job_id": "mcp-1"})
	if isErr || json.Unmarshal([]byte(text), &sub) != nil || sub != (client.Submitted{Tenant: "acme", JobID: "mcp-1"}) {
		t.Fatalf("submit_job: %v %s", isErr, text)
	}
	fleettest.Eventually(t, 30*time.Second, func() bool {
		isErr, text := call("job_result", map[string]any{"job_id": "mcp-1"})
		return !isErr && json.Unmarshal([]byte(text), &rep) == nil && rep.Solved && rep.Tenant == "acme"
	}, "job_result never gave mcp-1's report")
	var st schemas.JobStatus
	if isErr, text := call("job_status", map[string]any{"job_id": "mcp-1"}); isErr || json.Unmarshal([]byte(text), &st) != nil || st.State != schemas.StateSolved {
		t.Errorf("job_status: %v %s", isErr, text)
	}
	checkJobToolRefusals(t, call)
	res2, resp2 := callBreakGlass(t, cs, &mcp.CallToolParams{Name: "break_glass", Arguments: map[string]any{"problem": "break glass: main panics",
		"context_files": []string{"main.go"}, "request_id": "bg-mcp-1",
		"tried": map[string]any{"local_model": "no", "frontier_model": "no", "tools": "no"}}})
	if res2.IsError || resp2.Outcome != schemas.BreakGlassAnswered || resp2.Tenant != "acme" || resp2.Session != "mcp-s" {
		t.Errorf("break_glass over the API: %v %+v", res2.IsError, resp2)
	}
}

// TestAPIBreakGlassHeld: a call held for a person's approval says so on
// stderr and waits for the final answer, through the API as on NATS.
func TestAPIBreakGlassHeld(t *testing.T) {
	t.Parallel()
	a := newAPIFleetEnv(t)
	a.startJudge(t, 0.000001)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"breakglass", "break glass: the linker fails", "--tried", "local_model=no", "--tried", "frontier_model=no",
			"--tried", "tools=no", "--root", t.TempDir(), "--id", "bg-held-1", "--api", a.base, "--api-key", a.acme}, &out, &errb)
	}()
	fleettest.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(errb.String(), "maker: bg-held-1: ") && strings.Contains(errb.String(), "; waiting (up to --timeout 15m0s)")
	}, "no held note on stderr: %q", errb.String())
	if res := a.nats(t, "judge", "approve", "bg-held-1", "--by", "alice"); res.code != ExitOK {
		t.Fatalf("approve: exit %d, %s", res.code, res.stderr)
	}
	select {
	case c := <-code:
		if c != ExitOK || !strings.HasPrefix(out.String(), "ANSWERED (bg-held-1") {
			t.Errorf("after approval: exit %d, stdout %q, stderr %q", c, out.String(), errb.String())
		}
	case <-ctx.Done():
		t.Fatal("breakglass did not end after the approval")
	}
}

// TestAPIControlCommands: pause, resume, cancel, decide and status
// through the API print what they print on NATS (TestControlMessages,
// TestDecideCommand), with no coordinator running (serve writes the
// registry with the same checks); a tenant/id naming another tenant than
// --tenant is refused as on NATS; an unknown or revoked key is a clear
// error.
func TestAPIControlCommands(t *testing.T) {
	t.Parallel()
	a := newAPIFleetEnv(t)
	put := func(id, state, control string, st *schemas.JobStatus) {
		putJob(t, a.Topo, "acme", id, state, control, st)
	}
	put("paused", schemas.StatePaused, schemas.ControlPause, &schemas.JobStatus{State: schemas.StatePaused, Steps: 2, Coordinator: "c1"})
	put("running", schemas.StateRunning, schemas.ControlRun, &schemas.JobStatus{State: schemas.StateRunning, Steps: 2, Coordinator: "c1"})
	put("queued", schemas.StateQueued, schemas.ControlRun, nil)
	put("pausing", schemas.StateRunning, schemas.ControlPause, &schemas.JobStatus{State: schemas.StateRunning, Steps: 2})
	put("cancelling", schemas.StateRunning, schemas.ControlCancel, &schemas.JobStatus{State: schemas.StateRunning, Steps: 2})
	put("resuming", schemas.StatePaused, schemas.ControlRun, &schemas.JobStatus{State: schemas.StatePaused, Steps: 2})
	put("healthy", schemas.StatePaused, schemas.ControlPause, &schemas.JobStatus{State: schemas.StatePaused, Steps: 2})
	put("person", schemas.StatePaused, schemas.ControlPause, &schemas.JobStatus{State: schemas.StatePaused, Steps: 2, Rung: schemas.RungPanel})

	// Status first, on both paths, before anything changes.
	for _, id := range []string{"running", "paused", "pausing", "person"} {
		same(t, "status "+id, a.api(t, a.acme, "status", id), a.nats(t, "status", "acme/"+id))
		same(t, "status --json "+id, a.api(t, a.acme, "status", id, "--json"), a.nats(t, "status", "acme/"+id, "--json"))
	}
	if res := a.api(t, a.acme, "status", "queued"); res.code != ExitOK || res.stdout != "acme/queued: queued: "+apiQueuedReason+"\n" {
		t.Errorf("status of a queued job: exit %d, %q", res.code, res.stdout)
	}
	if res := a.api(t, a.acme, "status", "running"); !strings.Contains(res.stdout, ", on c1") {
		t.Errorf("status names no coordinator: %q", res.stdout)
	}
	same(t, "jobs list", a.api(t, a.acme, "jobs", "list", "--json"), a.nats(t, "jobs", "list", "--tenant", "acme", "--json"))

	for _, tc := range []struct {
		cmd, job, want string
	}{
		{"pause", "paused", "acme/paused: already paused\n"},
		{"resume", "running", "acme/running: already running\n"},
		{"resume", "queued", "acme/queued: not paused (the job is queued)\n"},
		{"pause", "pausing", "acme/pausing: pause already asked (the job is running; it pauses at the next step boundary)\n"},
		{"cancel", "cancelling", "acme/cancelling: cancel already asked (the job is running; it ends at the next step boundary)\n"},
		{"resume", "resuming", "acme/resuming: resume already asked (the job is paused; a coordinator picks it up where it stopped)\n"},
		{"pause", "running", "acme/running: pause asked (the job is running; it takes effect at the next step boundary)\n"},
		{"resume", "paused", "acme/paused: resume asked (the job is paused; it takes effect at the next step boundary)\n"},
	} {
		res := a.api(t, a.acme, tc.cmd, tc.job)
		if res.code != ExitOK || res.stdout != tc.want || res.stderr != "" {
			t.Errorf("maker %s %s --api: exit %d, stdout %q, stderr %q; want exit 0 and %q", tc.cmd, tc.job, res.code, res.stdout, res.stderr, tc.want)
		}
	}
	res := a.api(t, a.admin, "pause", "acme/paused", "--json")
	var m map[string]string
	if res.code != ExitOK || json.Unmarshal([]byte(res.stdout), &m) != nil ||
		m["tenant"] != "acme" || m["job_id"] != "paused" || m["control"] != schemas.ControlPause {
		t.Errorf("pause acme/paused --json with an admin key: exit %d, %q, %s", res.code, res.stdout, res.stderr)
	}
	if res := a.api(t, a.acme, "cancel", "cancelling"); res.code != ExitOK {
		t.Errorf("cancel: exit %d, %s", res.code, res.stderr)
	}
	if res := a.api(t, a.acme, "pause", "cancelling"); res.code != ExitUsage || !strings.Contains(res.stderr, "cancel") {
		t.Errorf("pause of a job being cancelled: exit %d, stderr %q; want refused (exit 2)", res.code, res.stderr)
	}

	// decide: refused for a step that does not wait, taken for the one that
	// does; who decides is the key's to say. (A plain tenant key may still
	// decide on this branch: approver keys are another change of issue 19.)
	for _, tc := range []struct {
		job, step string
		code      int
		says      string
	}{
		{"healthy", "2", ExitUsage, "step not waiting for a person: "},
		{"person", "1", ExitUsage, "step not waiting for a person: "},
		{"nope", "0", ExitError, "not found: no such job (HTTP 404)"},
	} {
		res := a.api(t, a.admin, "decide", "acme/"+tc.job, "--step", tc.step, "--vote", `{"move":[1,0,2]}`)
		if res.code != tc.code || res.stdout != "" || !strings.Contains(res.stderr, tc.says) {
			t.Errorf("decide %s --step %s: exit %d, stdout %q, stderr %q; want exit %d saying %q", tc.job, tc.step, res.code, res.stdout, res.stderr, tc.code, tc.says)
		}
	}
	if res := a.api(t, a.admin, "decide", "acme/person", "--step", "2", "--vote", "x", "--by", "mallory"); res.code != ExitUsage ||
		!strings.Contains(res.stderr, "--by cannot be given with --api") {
		t.Errorf("decide --by with --api: exit %d, stderr %q", res.code, res.stderr)
	}
	res = a.api(t, a.admin, "decide", "acme/person", "--step", "2", "--vote", `{"move":[1,0,2]}`, "--json")
	var d schemas.PersonDecision
	if res.code != ExitOK || json.Unmarshal([]byte(res.stdout), &d) != nil || d.Step != 2 || !strings.HasPrefix(d.By, "mk_") || d.At.IsZero() {
		t.Fatalf("decide the waiting step: exit %d, %q, %s", res.code, res.stdout, res.stderr)
	}
	res = a.api(t, a.admin, "decide", "acme/person", "--step", "2", "--vote", `{"move":[1,0,2]}`)
	if want := `acme/person: step 2 will be decided as "{\"move\":[1,0,2]}" by ` + d.By + ", and the job runs on\n"; res.code != ExitOK || res.stdout != want {
		t.Errorf("decide (text): exit %d, %q, want %q (%s)", res.code, res.stdout, want, res.stderr)
	}

	// The NATS path's rule: a tenant/id naming another tenant than --tenant.
	for _, args := range [][]string{
		{"status", "beta/j2", "--tenant", "acme"},
		{"pause", "beta/j2", "--tenant", "acme"},
		{"budget", "show", "--job", "beta/j2", "--tenant", "acme"},
	} {
		res := a.api(t, a.admin, args...)
		if res.code != ExitUsage || !strings.Contains(res.stderr, `names tenant "beta", but --tenant is "acme"`) {
			t.Errorf("%v: exit %d, stderr %q", args, res.code, res.stderr)
		}
	}

	// Keys the server does not take: one line saying so, exit 1.
	if res := a.api(t, "mk_000000000000_"+strings.Repeat("x", 43), "status", "running"); res.code != ExitError ||
		res.stderr != "maker: unauthorized: unknown or revoked API key (HTTP 401): check --api-key or $MAKER_API_KEY\n" {
		t.Errorf("unknown key: exit %d, stderr %q", res.code, res.stderr)
	}
	if _, err := a.keys.Revoke(t.Context(), a.acme); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 30*time.Second, func() bool {
		res := a.api(t, a.acme, "status", "running")
		return res.code == ExitError && strings.Contains(res.stderr, "unknown or revoked API key (HTTP 401)")
	}, "the revoked key still works")
}

// TestAPIFlags: every tenant-facing command takes --api and --api-key
// (and no other does); --api with an explicit --nats (or --redis), --api
// without a key, --api-key without --api and a malformed URL are usage
// errors before anything is sent; a server that does not answer is a
// clear error.
func TestAPIFlags(t *testing.T) {
	t.Parallel()
	want := map[string][]string{ // command path: its arguments
		"submit": {"--task", "hanoi", "--k", "1"}, "status": {"j1"}, "result": {"j1"}, "pause": {"j1"}, "resume": {"j1"}, "cancel": {"j1"},
		"decide": {"j1", "--step", "1", "--vote", "x"}, "jobs list": nil, "dlq list": nil,
		"batch submit": {"-"}, "batch status": {"batch_x"}, "batch output": {"batch_x"}, "batch errors": {"batch_x"},
		"batch cancel": {"batch_x"}, "batch list": nil,
		"breakglass": {"break glass: x"}, "judge answer": {"bg-1"}, "budget show": nil, "budget set": {"--job", "j1", "--usd", "1"},
		"task list": nil, "task show": {"multiply"}, "mcp": nil, "fleet": nil,
	}
	var got []string
	walk(newRoot(&env{}), func(cmd *cobra.Command) {
		if cmd.Flags().Lookup("api") != nil {
			got = append(got, strings.Join(commandPath(cmd), " "))
		}
	})
	var wantPaths []string
	for p := range want {
		wantPaths = append(wantPaths, p)
	}
	slices.Sort(got)
	slices.Sort(wantPaths)
	if !slices.Equal(got, wantPaths) {
		t.Errorf("commands with --api: %v\nwant %v", got, wantPaths)
	}
	// The model's --api-key of the roles is untouched.
	for _, path := range [][]string{{"judge"}, {"voter"}, {"run"}, {"calibrate"}, {"simllm"}} {
		cmd, _, err := newRoot(&env{}).Find(path)
		if err != nil || cmd.Flags().Lookup("api-key") == nil || cmd.Flags().Lookup("api") != nil {
			t.Errorf("%v: --api-key %v, --api %v (%v); want the model's key only", path, cmd.Flags().Lookup("api-key") != nil, cmd.Flags().Lookup("api") != nil, err)
		}
	}

	const dead = "http://127.0.0.1:1"
	for path, args := range want {
		cmd := append(strings.Fields(path), args...)
		other := []string{"--nats", "nats://127.0.0.1:1"}
		if strings.HasPrefix(path, "budget") {
			other = []string{"--redis", "redis://127.0.0.1:1"}
		}
		for _, tc := range []struct {
			name string
			args []string
			code int
			says string
		}{
			{"with " + other[0], append([]string{"--api", dead, "--api-key", "k"}, other...), ExitUsage, "give --api or " + other[0] + ", not both"},
			{"without a key", []string{"--api", dead}, ExitUsage, "needs an API key: --api-key KEY or $MAKER_API_KEY"},
			{"key without --api", []string{"--api-key", "k"}, ExitUsage, "--api-key needs --api URL"},
			{"a bad URL", []string{"--api", "ftp://host", "--api-key", "k"}, ExitUsage, `--api ftp://host: base URL "ftp://host": want http(s)://host[:port]`},
		} {
			res := runMain(t, append(slices.Clone(cmd), tc.args...)...)
			if res.code != tc.code || !strings.Contains(res.stderr, tc.says) || res.stdout != "" {
				t.Errorf("maker %s %s: exit %d, stdout %q, stderr %q; want %d saying %q", path, strings.Join(tc.args, " "), res.code, res.stdout, res.stderr, tc.code, tc.says)
			}
		}
	}
	for _, args := range [][]string{{"status", "j1"}, {"jobs", "list"}, {"task", "list"}, {"dlq", "list"}} {
		res := runMain(t, append(args, "--api", dead, "--api-key", "k")...)
		if res.code != ExitError || !strings.HasPrefix(res.stderr, "maker: cannot reach the API (Get "+dead) {
			t.Errorf("%v on a dead server: exit %d, stderr %q", args, res.code, res.stderr)
		}
	}
	if res := runMain(t, "submit", "--task", "hanoi", "--k", "1", "--api", dead, "--api-key", "k", "--calibration-model", "m"); res.code != ExitUsage ||
		!strings.Contains(res.stderr, "--calibration-model cannot be given with --api") {
		t.Errorf("submit --calibration-model --api: exit %d, stderr %q", res.code, res.stderr)
	}
}

// TestAPIEnv: $MAKER_API_URL and $MAKER_API_KEY stand for --api and
// --api-key. Not parallel: it sets the environment every command reads.
func TestAPIEnv(t *testing.T) {
	a := newAPIFleetEnv(t)
	putJob(t, a.Topo, "acme", "envjob", schemas.StatePaused, schemas.ControlPause, &schemas.JobStatus{State: schemas.StatePaused, Steps: 2})
	t.Setenv("MAKER_API_URL", a.base)
	t.Setenv("MAKER_API_KEY", a.acme)
	t.Setenv("MAKER_NATS_URL", "nats://127.0.0.1:1") // not dialled: an explicit --nats alone would be refused
	if res := runMain(t, "status", "envjob"); res.code != ExitOK || res.stdout != "acme/envjob: paused, step 2 of 15 (0.0%), 0 samples, 0 errors\n" {
		t.Errorf("status with the environment: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if res := runMain(t, "status", "envjob", "--api-key", a.admin); res.code != ExitError || !strings.Contains(res.stderr, "(HTTP 404)") {
		t.Errorf("--api-key over $MAKER_API_KEY: exit %d, stderr %q; want the flag's key (tenant ops: not found)", res.code, res.stderr)
	}
	t.Setenv("MAKER_API_KEY", "")
	if res := runMain(t, "status", "envjob"); res.code != ExitUsage || !strings.Contains(res.stderr, "$MAKER_API_KEY") {
		t.Errorf("without a key: exit %d, stderr %q", res.code, res.stderr)
	}
}

// TestREADMEAPIFlag: every command line in the README that passes --api
// is one of a command that takes it.
func TestREADMEAPIFlag(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if checked := checkREADMEFlag(t, string(raw), newRoot(&env{}), "api"); checked < 3 {
		t.Errorf("checked %d command lines with --api in the README, want at least 3", checked)
	}
}
