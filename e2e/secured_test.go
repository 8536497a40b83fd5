package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// refusedWithin bounds a refused command: the server's permission error
// ends it at once, it never waits for a timeout.
const refusedWithin = 10 * time.Second

// TestSecuredFleet follows docs/security.md's "Running a fleet secured"
// with the real binaries: `maker auth init` makes the fleet's identities
// (and refuses tenant ones), a nats-server runs with the auth.conf it
// wrote, the admin creates the topology, sets the fleet's capacity and
// makes the tenants' API keys, every role runs on its own seed, and the
// tenants use the CLI over `maker serve` with their keys only. A tenant
// runs its job end to end and reads it; another tenant finds nothing of
// it; the voter's identity can neither forge a job nor turn a dead letter
// into an API key; the approver decides only a step waiting for a person;
// a held break-glass call asked through the API is approved and answered;
// the roles are refused nothing.
func TestSecuredFleet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats-auth")
	res := runMaker(t, cmdTimeout, "auth", "init", "--dir", dir, "--tenant", "alpha")
	if res.code != 2 || !strings.Contains(res.stderr, "maker keys create --tenant alpha") {
		t.Fatalf("auth init --tenant: exit %d, %q; want refused (exit 2) pointing at API keys", res.code, res.stderr)
	}
	if res := runMaker(t, cmdTimeout, "auth", "init", "--dir", dir); res.code != 0 {
		t.Fatalf("auth init: exit %d: %s", res.code, res.stderr)
	}
	srv := authtest.StartConf(t, dir, "include ./"+auth.ConfigFile+"\n")
	seed := func(identity string) string { return filepath.Join(dir, identity+auth.SeedExt) }
	as := func(identity string, args ...string) []string {
		return append(args, "--nats", srv.URL, "--nats-nkey", seed(identity))
	}
	admin := srv.Connect(t, auth.Admin)
	js, err := jetstream.New(admin.Conn)
	if err != nil {
		t.Fatal(err)
	}
	svc := &services{natsURL: srv.URL, redisURL: testkit.StartRedis(t).URL(), nc: admin.Conn, js: js}
	// The model serves the voters' model and the judge's panel (m1-m3, j).
	model := startSim(t, "simllm", "--accuracy", "0.9", "--seed", "7", "--latency", "2ms", "--model", "sim-1,m1,m2,m3,j")

	// The voter starts first: it waits for the topology, and creates
	// nothing (it may not).
	v := startProc(t, "voter", as(auth.Voter, "voter", "--llm-base-url", model.url, "--model", "sim-1", "--id", "voter-1", "--concurrency", "8")...)
	waitFor(t, 20*time.Second, "the voter waiting for the topology", func() bool {
		return strings.Contains(v.stderr(), "waiting for the fleet topology")
	}, v)
	// Step 3: the admin makes the topology and sets the fleet's capacity.
	for _, args := range [][]string{{"topology", "create"}, {"quota", "set", "--fleet", "--max-inflight", "8"}} {
		if res := runMaker(t, cmdTimeout, as(auth.Admin, args...)...); res.code != 0 {
			t.Fatalf("admin: maker %s: exit %d: %s", strings.Join(args, " "), res.code, res.stderr)
		}
	}
	// Step 4: the roles, each on its own seed.
	coord := startProc(t, "coordinator", as(auth.Coordinator, "coordinator", "--redis", svc.redisURL, "--id", "coord-1")...)
	svc.waitFleet(t, coord, v)
	cfg := filepath.Join(t.TempDir(), "judge.yaml")
	if err := os.WriteFile(cfg, []byte("panels: {architecture: [m1, m2, m3]}\njudge_model: j\ndefault_price: {input_usd_per_mtok: 1, output_usd_per_mtok: 250}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	j := startProc(t, "judge", as(auth.Judge, "judge", "--llm-base-url", model.url, "--config", cfg)...)
	api := startServe(t, svc, "--nats-nkey", seed(auth.API))

	// Step 5: the admin makes the tenants' keys; the tenants hold nothing else.
	key := func(tenant string, extra ...string) string {
		res := runMaker(t, cmdTimeout, as(auth.Admin, append([]string{"keys", "create", "--tenant", tenant, "--name", tenant + "-ci", "--json"}, extra...)...)...)
		var out struct {
			Key string `json:"key"`
		}
		if res.code != 0 || json.Unmarshal([]byte(res.stdout), &out) != nil || out.Key == "" {
			t.Fatalf("keys create --tenant %s: exit %d, %q, %s", tenant, res.code, res.stdout, res.stderr)
		}
		return out.Key
	}
	alphaKey, betaKey := key("alpha"), key("beta")
	asTenant := func(k string, args ...string) []string { return append(args, "--api", api.url, "--api-key", k) }

	// Tenant alpha runs a job end to end through maker serve.
	res = runMaker(t, 60*time.Second, asTenant(alphaKey, "submit", "--job-id", "a1",
		"--task", "hanoi", "--disks", "3", "--k", "2", "--seed", "7", "--wait", "--json", "--timeout", "50s")...)
	if res.code != 0 {
		t.Fatalf("alpha's submit --wait: exit %d: %s", res.code, res.stderr)
	}
	if rep := parseReport(t, res.stdout); !rep.Solved || rep.Steps != 7 || rep.Tenant != "alpha" {
		t.Fatalf("alpha's job: tenant %s, state %s, %d steps; want alpha's, solved in 7", rep.Tenant, rep.State, rep.Steps)
	}
	res = runMaker(t, cmdTimeout, asTenant(alphaKey, "submit", "--job-id", "a1",
		"--task", "hanoi", "--disks", "3", "--k", "2", "--seed", "7", "--json")...)
	if res.code != 0 || !strings.Contains(res.stdout, `"duplicate":true`) {
		t.Errorf("alpha resubmits a1: exit %d, %q, %s; want a duplicate", res.code, res.stdout, res.stderr)
	}
	for _, args := range [][]string{
		{"status", "a1", "--json"},
		{"result", "a1", "--json"},
		{"jobs", "list", "--json"},
		{"dlq", "list"},
	} {
		res := runMaker(t, cmdTimeout, asTenant(alphaKey, args...)...)
		if res.code != 0 {
			t.Errorf("alpha: maker %s: exit %d: %s", strings.Join(args, " "), res.code, res.stderr)
			continue
		}
		if args[0] == "jobs" {
			var rows []jobRow
			if err := json.Unmarshal([]byte(res.stdout), &rows); err != nil || len(rows) != 1 || rows[0].JobID != "a1" || rows[0].State != schemas.StateSolved {
				t.Errorf("alpha's jobs list: %q (%v); want a1 solved", res.stdout, err)
			}
		}
	}

	// Tenant beta finds nothing of alpha's: its ids are unknown to beta.
	for _, args := range [][]string{
		{"status", "a1"},
		{"result", "a1"},
		{"pause", "a1"},
		{"cancel", "a1"},
		{"status", "alpha/a1"},
	} {
		res := runMaker(t, cmdTimeout, asTenant(betaKey, args...)...)
		if res.code == 0 || !strings.Contains(strings.ToLower(res.stderr), "not found") {
			t.Errorf("beta: maker %s: exit %d, stderr %q; want not found", strings.Join(args, " "), res.code, res.stderr)
		}
	}
	res = runMaker(t, cmdTimeout, asTenant(betaKey, "submit", "--tenant", "alpha", "--task", "hanoi", "--disks", "3")...)
	if res.code != 2 {
		t.Errorf("beta submits as alpha: exit %d, %q; want refused (exit 2)", res.code, res.stderr)
	}
	res = runMaker(t, cmdTimeout, asTenant(betaKey, "jobs", "list", "--json")...)
	if res.code != 0 || strings.TrimSpace(res.stdout) != "[]" {
		t.Errorf("beta's jobs list: exit %d, %q, %s; want none", res.code, res.stdout, res.stderr)
	}

	// The voter's identity may neither announce a decided step nor queue a
	// job; the api's may not publish a result.
	for _, c := range []struct{ identity, subject string }{
		{auth.Voter, bus.DefaultNamespace.String() + ".v1.decided.alpha.a1"},
		{auth.Voter, bus.DefaultNamespace.JobSubject("alpha")},
		{auth.API, bus.DefaultNamespace.String() + ".v1.result.alpha.a1.0"},
	} {
		conn := srv.Connect(t, c.identity)
		if err := conn.Publish(c.subject, forgedJob(t, "alpha", "forged")); err != nil {
			t.Fatal(err)
		}
		if conn.WaitViolation(c.subject, refusedWithin) == nil {
			t.Errorf("%s published on %s: no permission violation", c.identity, c.subject)
		}
	}

	// A voter's dead letter naming the API keys' bucket as its original
	// subject: the admin's routine replay refuses it; no key is written.
	voter := srv.Connect(t, auth.Voter)
	forgedKey := bus.DefaultNamespace.String() + "_apikeys"
	dl := &schemas.DeadLetter{
		Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: bus.DefaultNamespace.SamplesStream(), Seq: 1,
		Subject: "$KV." + forgedKey + ".0123abcd", Consumer: bus.ConsumerVoters, Reason: "unreadable", Deliveries: 1,
		Data: []byte(`{"kind":"api_key","tenant":"beta","admin":true}`), At: time.Now().UTC(),
	}
	dlData, err := schemas.Encode(dl)
	if err != nil {
		t.Fatal(err)
	}
	if err := voter.Publish(bus.DefaultNamespace.DLQSubject("alpha", "a1"), dlData); err != nil {
		t.Fatal(err)
	}
	if err := voter.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the forged dead letter", func() bool {
		res := runMaker(t, cmdTimeout, as(auth.Admin, "dlq", "list", "--all-tenants", "--json")...)
		return res.code == 0 && strings.Contains(res.stdout, forgedKey)
	})
	res = runMaker(t, cmdTimeout, as(auth.Admin, "dlq", "replay", "--all")...)
	if res.code == 0 {
		t.Errorf("dlq replay --all of a forged dead letter: exit 0, %q; want it refused", res.stdout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	keys, err := js.KeyValue(ctx, forgedKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Get(ctx, "0123abcd"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the replay wrote an API key record (err %v)", err)
	}

	// The approver decides only a step waiting for a person: a running
	// healthy job's step is refused, as is a finished job's. A long job
	// at a margin that keeps it healthy at the model's 0.9.
	res = runMaker(t, cmdTimeout, asTenant(alphaKey, "submit", "--job-id", "a2", "--task", "hanoi", "--disks", "12", "--k", "5", "--seed", "7", "--json")...)
	if res.code != 0 {
		t.Fatalf("alpha submits a2: exit %d: %s", res.code, res.stderr)
	}
	var st schemas.JobStatus
	waitFor(t, 30*time.Second, "a2 running", func() bool {
		res := runMaker(t, cmdTimeout, asTenant(alphaKey, "status", "a2", "--json")...)
		return res.code == 0 && json.Unmarshal([]byte(res.stdout), &st) == nil && st.Steps >= 3
	}, coord, v)
	res = runMaker(t, cmdTimeout, as(auth.Approver, "decide", "a2", "--tenant", "alpha", "--step", "1000",
		"--vote", `{"move":[1,0,2]}`, "--by", "mallory")...)
	if res.code != 2 || !strings.Contains(res.stderr, "not waiting for a person") {
		t.Errorf("approver decides a healthy running job: exit %d, %q; want refused (exit 2, not waiting for a person)", res.code, res.stderr)
	}
	res = runMaker(t, cmdTimeout, as(auth.Approver, "decide", "a1", "--tenant", "alpha", "--step", "3",
		"--vote", `{"move":[1,0,2]}`, "--by", "mallory")...)
	if res.code != 2 || !strings.Contains(res.stderr, "ended solved") {
		t.Errorf("approver decides a finished job: exit %d, %q; want refused (exit 2, ended solved)", res.code, res.stderr)
	}
	// A tenant's key may not decide, even its own job.
	res = runMaker(t, cmdTimeout, asTenant(alphaKey, "decide", "a2", "--step", "1000", "--vote", `{"move":[1,0,2]}`)...)
	if res.code == 0 || !strings.Contains(strings.ToLower(res.stderr), "approver") {
		t.Errorf("alpha's key decides its own job: exit %d, %q; want refused (approvers only)", res.code, res.stderr)
	}
	// Alpha cancels its own job through the coordinators.
	res = runMaker(t, cmdTimeout, asTenant(alphaKey, "cancel", "a2")...)
	if res.code != 0 {
		t.Errorf("alpha cancels a2: exit %d: %s", res.code, res.stderr)
	}

	// A break-glass call of alpha's, asked through maker serve, is held for
	// approval: the approver approves it as itself, the judge runs it.
	// Approving as another identity is refused, saying why.
	bg := startProc(t, "breakglass", asTenant(alphaKey, append([]string{"breakglass", "break glass: how should we split the monolith's module boundaries?",
		"--type", "architecture", "--budget", "3", "--id", "held-1", "--session", "s1", "--json"}, triedFlags...)...)...)
	waitFor(t, 30*time.Second, "the hold", func() bool { return strings.Contains(bg.stderr(), "maker judge approve held-1") }, bg, j, api.proc)
	res = runMaker(t, cmdTimeout, as(auth.Approver, "judge", "approve", "held-1", "--by", "alice", "--as", "admin")...)
	if res.code == 0 || !strings.Contains(res.stderr, "permission denied") || !strings.Contains(res.stderr, "--as admin is not this connection's NATS identity approver") {
		t.Errorf("approver approves --as admin: exit %d, %q; want refused, naming the identity", res.code, res.stderr)
	}
	res = runMaker(t, cmdTimeout, as(auth.Approver, "judge", "approve", "held-1", "--by", "alice")...)
	if res.code != 0 {
		t.Errorf("approver approves held-1: exit %d: %s", res.code, res.stderr)
	}
	if code := bg.wait(60 * time.Second); code != 0 || !strings.Contains(bg.stdout(), `"outcome": "answered"`) {
		t.Errorf("alpha's approved break-glass call: exit %d, %s %s; want answered", code, bg.stdout(), bg.stderr())
	}
	// Beta cannot read alpha's answer.
	res = runMaker(t, cmdTimeout, asTenant(betaKey, "judge", "answer", "held-1")...)
	if res.code == 0 {
		t.Errorf("beta reads alpha's break-glass answer: exit 0, %q", res.stdout)
	}

	// Least privilege is enough: the roles were refused nothing.
	for _, p := range []*proc{coord, v, j, api.proc} {
		if strings.Contains(p.stderr(), "refused this identity") {
			t.Errorf("%s was refused something:\n%s", p.name, p.stderr())
		}
	}
}

// forgedJob is a valid job spec of tenant, as a forger would encode it.
func forgedJob(t *testing.T, tenant, id string) []byte {
	t.Helper()
	spec := schemas.JobSpec{Tenant: tenant, JobID: id, Task: "hanoi", Params: json.RawMessage(`{"disks":3}`), K: 2}
	if err := jobs.Prepare(context.Background(), &spec, taskreg.New(nil, builtin.Registry(), taskspec.CompileSpec)); err != nil {
		t.Fatal(err)
	}
	data, err := schemas.Encode(&spec)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
