package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/cmd/maker/cli"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// The lifecycle commands run against a bare NATS (no coordinator): they
// only read and write the registry, so jobs stay queued throughout.

const cmdTimeout = 30 * time.Second

// maker runs the binary against svc's NATS and fails the test unless it
// exits with code.
func (s *services) maker(t *testing.T, code int, args ...string) result {
	t.Helper()
	res := runMaker(t, cmdTimeout, append(args, "--nats", s.natsURL)...)
	if res.code != code {
		t.Fatalf("maker %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.code, code, res.stdout, res.stderr)
	}
	return res
}

// jobRow is a line of `maker jobs list --json`.
type jobRow struct {
	Tenant  string `json:"tenant"`
	JobID   string `json:"job_id"`
	Task    string `json:"task"`
	K       int    `json:"k"`
	State   string `json:"state"`
	Control string `json:"control"`
}

func (s *services) jobList(t *testing.T, extra ...string) []jobRow {
	t.Helper()
	res := s.maker(t, cli.ExitOK, append([]string{"jobs", "list", "--json"}, extra...)...)
	var rows []jobRow
	if err := json.Unmarshal([]byte(res.stdout), &rows); err != nil || rows == nil {
		t.Fatalf("jobs list --json printed %q: %v (want a JSON array)", res.stdout, err)
	}
	return rows
}

func (s *services) jobStatus(t *testing.T, ref string) schemas.JobStatus {
	t.Helper()
	res := s.maker(t, cli.ExitOK, "status", ref, "--json")
	var st schemas.JobStatus
	if err := json.Unmarshal([]byte(res.stdout), &st); err != nil {
		t.Fatalf("status --json printed %q: %v", res.stdout, err)
	}
	return st
}

func (s *services) topology(t *testing.T) *topology.Topology {
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	topo, err := topology.Ensure(ctx, s.js, topology.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestJobLifecycleCommands: submit without --wait prints the job id (and
// with --json a job_id); jobs list (of --tenant, default "default", or
// --all-tenants) and status show the job queued; pause, resume and cancel
// change its control (no coordinator runs: written to the registry
// directly); result of an unfinished job fails saying so; a job being
// cancelled or finished cannot be paused or resumed; a JOB naming another
// tenant than --tenant is refused.
func TestJobLifecycleCommands(t *testing.T) {
	svc := startServices(t, false)
	submit := []string{"submit", "--k", "1", "--disks", "3"}

	res := svc.maker(t, cli.ExitOK, append(submit, "--job-id", "life-1")...)
	if strings.TrimSpace(res.stdout) != "life-1" {
		t.Errorf("submit printed %q, want the job id", res.stdout)
	}
	res = svc.maker(t, cli.ExitOK, append(submit, "--job-id", "life-2", "--json")...)
	sub := parseJSONOnly(t, res.stdout)
	if sub["job_id"] != "life-2" || sub["tenant"] != schemas.DefaultTenant || sub["duplicate"] != false {
		t.Errorf("submit --json printed %v, want job_id life-2, tenant default, not a duplicate", sub)
	}
	res = svc.maker(t, cli.ExitOK, append(submit, "--job-id", "life-3", "--tenant", "beta")...)
	if strings.TrimSpace(res.stdout) != "life-3" {
		t.Errorf("submit printed %q, want the job id", res.stdout)
	}

	rows := svc.jobList(t, "--all-tenants")
	if len(rows) != 3 {
		t.Fatalf("jobs list shows %d jobs, want 3: %+v", len(rows), rows)
	}
	for i, want := range []string{"default/life-1", "default/life-2", "beta/life-3"} {
		r := rows[i]
		if r.Tenant+"/"+r.JobID != want || r.State != schemas.StateQueued || r.Control != schemas.ControlRun || r.Task != "hanoi" || r.K != 1 {
			t.Errorf("row %d = %+v, want %s queued, run, hanoi, k 1", i, r, want)
		}
	}
	if rows := svc.jobList(t, "--tenant", "beta"); len(rows) != 1 || rows[0].JobID != "life-3" {
		t.Errorf("jobs list --tenant beta = %+v, want only life-3", rows)
	}
	if rows := svc.jobList(t, "--tenant", "nobody"); len(rows) != 0 {
		t.Errorf("jobs list --tenant nobody = %+v, want []", rows)
	}
	if rows := svc.jobList(t); len(rows) != 2 || rows[0].Tenant != schemas.DefaultTenant || rows[1].Tenant != schemas.DefaultTenant {
		t.Errorf("jobs list = %+v, want only the default tenant's two jobs", rows)
	}
	for _, args := range [][]string{
		{"status", "beta/life-3", "--tenant", "default"},
		{"pause", "beta/life-3", "--tenant", "alpha"},
		{"cancel", "default/life-1", "--tenant", "beta"},
	} {
		res := svc.maker(t, cli.ExitUsage, args...)
		if res.stdout != "" || !strings.Contains(res.stderr, "names tenant") {
			t.Errorf("maker %v: stdout %q, stderr %q; want it refused for naming another tenant", args, res.stdout, res.stderr)
		}
	}
	if res := svc.maker(t, cli.ExitOK, "jobs", "list"); !strings.Contains(res.stdout, "life-1") || !strings.Contains(res.stdout, "STATE") {
		t.Errorf("jobs list (text) printed %q", res.stdout)
	}

	for _, ref := range []string{"life-1", "default/life-1"} {
		st := svc.jobStatus(t, ref)
		if st.Tenant != schemas.DefaultTenant || st.JobID != "life-1" || st.State != schemas.StateQueued || st.Control != "" {
			t.Errorf("status %s = %+v, want default/life-1 queued, no control", ref, st)
		}
	}
	if st := svc.jobStatus(t, "beta/life-3"); st.Tenant != "beta" || st.State != schemas.StateQueued {
		t.Errorf("status beta/life-3 = %+v", st)
	}
	if res := svc.maker(t, cli.ExitOK, "status", "life-1"); !strings.Contains(res.stdout, "default/life-1: queued") {
		t.Errorf("status (text) printed %q", res.stdout)
	}

	// Control, as seen by status (while asked) and jobs list (always).
	control := func(cmd, want string) {
		t.Helper()
		res := svc.maker(t, cli.ExitOK, cmd, "life-1")
		if !strings.Contains(res.stdout, "default/life-1") {
			t.Errorf("%s printed %q, want it to name the job", cmd, res.stdout)
		}
		st := svc.jobStatus(t, "life-1")
		wantStatus := want
		if want == schemas.ControlRun {
			wantStatus = "" // nothing asked
		}
		if st.Control != wantStatus || st.State != schemas.StateQueued {
			t.Errorf("after %s: status control %q state %q, want %q, queued", cmd, st.Control, st.State, wantStatus)
		}
		if rows := svc.jobList(t, "--tenant", schemas.DefaultTenant); len(rows) != 2 || rows[0].Control != want || rows[1].Control != schemas.ControlRun {
			t.Errorf("after %s: jobs list %+v, want life-1 %s and life-2 untouched", cmd, rows, want)
		}
	}
	control("pause", schemas.ControlPause)
	control("resume", schemas.ControlRun)
	control("pause", schemas.ControlPause)
	res = svc.maker(t, cli.ExitOK, "resume", "life-1", "--json")
	if m := parseJSONOnly(t, res.stdout); m["control"] != schemas.ControlRun || m["job_id"] != "life-1" {
		t.Errorf("resume --json printed %v", m)
	}
	control("cancel", schemas.ControlCancel)
	for _, cmd := range []string{"pause", "resume"} {
		res := svc.maker(t, cli.ExitUsage, cmd, "life-1")
		if !strings.Contains(res.stderr, "default/life-1") || !strings.Contains(res.stderr, "cancel") {
			t.Errorf("%s of a job being cancelled: stderr %q, want it to say the job is being cancelled", cmd, res.stderr)
		}
	}

	for _, args := range [][]string{{"result", "life-2"}, {"result", "life-2", "--json"}} {
		res := svc.maker(t, cli.ExitError, args...)
		if res.stdout != "" || !strings.Contains(res.stderr, "default/life-2") || !strings.Contains(res.stderr, "not finished") {
			t.Errorf("%v of a queued job: stdout %q stderr %q, want a message that it has not finished", args, res.stdout, res.stderr)
		}
	}

	// A finished job can be neither paused, resumed nor cancelled.
	ctx, cancel := opCtx()
	defer cancel()
	if err := jobs.MarkFinished(ctx, svc.topology(t), schemas.DefaultTenant, "life-2", schemas.StateSolved); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"pause", "resume", "cancel"} {
		res := svc.maker(t, cli.ExitUsage, cmd, "life-2")
		if !strings.Contains(res.stderr, "finished") || !strings.Contains(res.stderr, "default/life-2") {
			t.Errorf("%s of a finished job: stderr %q, want it to say the job has finished", cmd, res.stderr)
		}
	}
	if st := svc.jobStatus(t, "life-2"); st.State != schemas.StateSolved {
		t.Errorf("status of the finished job: state %q, want solved", st.State)
	}
}

// TestJobCommandsBadRefs: every job command names an unknown job and exits
// 1; a malformed job reference is refused with the usage code before
// anything is asked.
func TestJobCommandsBadRefs(t *testing.T) {
	svc := startServices(t, false)
	svc.maker(t, cli.ExitOK, "submit", "--k", "1", "--disks", "3", "--job-id", "known")
	cmds := [][]string{{"status"}, {"status", "--json"}, {"result"}, {"pause"}, {"resume"}, {"cancel"}}
	for _, cmd := range cmds {
		for _, ref := range []string{"nope", "beta/known"} {
			args := append([]string{cmd[0], ref}, cmd[1:]...)
			res := svc.maker(t, cli.ExitError, args...)
			name := ref
			if !strings.Contains(ref, "/") {
				name = schemas.DefaultTenant + "/" + ref
			}
			if res.stdout != "" || !strings.HasPrefix(res.stderr, "maker: ") || !strings.Contains(res.stderr, name) {
				t.Errorf("maker %v: stdout %q stderr %q, want a message naming %s", args, res.stdout, res.stderr, name)
			}
		}
		for _, bad := range []struct{ ref, want string }{
			{"no spaces", "job id"},
			{"a.b", "job id"},
			{"x>", "job id"},
			{"Upper/known", "tenant"},
			{"default/", "job id"},
			{"/known", "tenant"},
			{"a/b/c", `invalid JOB "a/b/c": JOB is id or tenant/id`},
		} {
			args := append([]string{cmd[0], bad.ref}, cmd[1:]...)
			res := runMaker(t, cmdTimeout, append(args, "--nats", svc.natsURL)...)
			checkRefused(t, res, bad.want)
			if !strings.HasPrefix(res.stderr, "maker: invalid ") {
				t.Errorf("maker %v: stderr %q, want it to start \"maker: invalid\" and say what is", args, res.stderr)
			}
		}
	}
	checkRefused(t, runMaker(t, cmdTimeout, "status", "--nats", svc.natsURL), "JOB")
	checkRefused(t, runMaker(t, cmdTimeout, "jobs", "list", "--tenant", "Bad_Tenant", "--nats", svc.natsURL), "tenant")
	// Nothing was changed by any of it.
	if rows := svc.jobList(t); len(rows) != 1 || rows[0].Control != schemas.ControlRun || rows[0].State != schemas.StateQueued {
		t.Errorf("jobs list %+v, want the one job untouched", rows)
	}
}

// TestResubmitConflict: the same job id with another spec (params, k,
// seed, sample cap, temperature) is refused with the usage code, naming
// what differs, and neither the job stream nor the registry changes; the
// same job again is a duplicate that changes nothing either (and says so).
func TestResubmitConflict(t *testing.T) {
	svc := startServices(t, false)
	svc.maker(t, cli.ExitOK, "submit", "--k", "1", "--disks", "3", "--job-id", "dup")
	before := svc.jobMessages(t)
	if before != 1 {
		t.Fatalf("job stream holds %d messages after one submit, want 1", before)
	}
	rec := func() (schemas.JobRecord, uint64) {
		t.Helper()
		ctx, cancel := opCtx()
		defer cancel()
		r, rev, err := jobs.Get(ctx, svc.topology(t), schemas.DefaultTenant, "dup")
		if err != nil {
			t.Fatal(err)
		}
		return r, rev
	}
	r0, rev0 := rec()

	for _, tc := range []struct {
		args []string
		says string // which field differs, with both values
	}{
		{[]string{"--k", "1", "--disks", "4"}, `params {"disks":3} (this one: {"disks":4})`},
		{[]string{"--k", "2", "--disks", "3"}, "k 1 (this one: 2)"},
		{[]string{"--k", "1", "--disks", "4", "--json"}, "params"},
		{[]string{"--k", "1", "--disks", "3", "--seed", "8"}, "seed 1 (this one: 8)"},
		{[]string{"--k", "1", "--disks", "3", "--max-samples", "50"}, "max_samples_per_step 100 (this one: 50)"},
		{[]string{"--k", "1", "--disks", "3", "--temperature-rest", "0.3"}, "temperature_rest 0.1 (this one: 0.3)"},
	} {
		res := runMaker(t, cmdTimeout, append([]string{"submit", "--job-id", "dup", "--nats", svc.natsURL}, tc.args...)...)
		checkRefused(t, res, "default/dup")
		if !strings.Contains(res.stderr, tc.says) {
			t.Errorf("submit %v: stderr %q does not say %q", tc.args, res.stderr, tc.says)
		}
	}
	res := svc.maker(t, cli.ExitOK, "submit", "--k", "1", "--disks", "3", "--job-id", "dup", "--json")
	if m := parseJSONOnly(t, res.stdout); m["job_id"] != "dup" || m["duplicate"] != true {
		t.Errorf("resubmitting the same job printed %v, want a duplicate", m)
	}
	res = svc.maker(t, cli.ExitOK, "submit", "--k", "1", "--disks", "3", "--job-id", "dup")
	if res.stdout != "dup\n" || !strings.Contains(res.stderr, "duplicate: nothing ran") {
		t.Errorf("resubmitting the same job (text): stdout %q, stderr %q; want the job id, and \"duplicate: nothing ran\" on stderr", res.stdout, res.stderr)
	}

	if n := svc.jobMessages(t); n != before {
		t.Errorf("job stream holds %d messages after resubmits, want %d", n, before)
	}
	r1, rev1 := rec()
	if rev1 != rev0 || string(r1.Spec.Params) != string(r0.Spec.Params) || r1.Spec.K != r0.Spec.K {
		t.Errorf("registry record changed: revision %d -> %d, params %s -> %s, k %d -> %d",
			rev0, rev1, r0.Spec.Params, r1.Spec.Params, r0.Spec.K, r1.Spec.K)
	}
	if rows := svc.jobList(t); len(rows) != 1 {
		t.Errorf("jobs list shows %d jobs, want 1", len(rows))
	}
}

// TestDLQCommandsEmpty: on an empty DLQ, dlq list --json prints [] and a
// replay of a sequence that is not there is refused with the usage code.
func TestDLQCommandsEmpty(t *testing.T) {
	svc := startServices(t, false)
	svc.topology(t) // a fleet with nothing dead yet: the dlq commands create nothing
	res := svc.maker(t, cli.ExitOK, "dlq", "list", "--json")
	if strings.TrimSpace(res.stdout) != "[]" {
		t.Errorf("dlq list --json on an empty DLQ printed %q, want []", res.stdout)
	}
	if res := svc.maker(t, cli.ExitOK, "dlq", "list"); !strings.Contains(res.stdout, "SEQ") || len(lines(res.stdout)) != 1 {
		t.Errorf("dlq list (text) on an empty DLQ printed %q, want only the header", res.stdout)
	}
	res = svc.maker(t, cli.ExitUsage, "dlq", "replay", "99")
	if res.stdout != "" || !strings.Contains(res.stderr, "no such dead letter") || !strings.Contains(res.stderr, "99") {
		t.Errorf("dlq replay 99: stdout %q stderr %q, want a message that there is no dead letter 99", res.stdout, res.stderr)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "replay"}, "--all"},
		{[]string{"dlq", "replay", "0"}, "not a dead-letter sequence"},
		{[]string{"dlq", "replay", "x"}, "not a dead-letter sequence"},
		{[]string{"dlq", "replay", "--all", "5"}, "not both"},
		{[]string{"dlq", "list", "--limit", "0"}, "--limit"},
		{[]string{"dlq", "list", "--tenant", "Bad_Tenant"}, "tenant"},
	} {
		checkRefused(t, runMaker(t, cmdTimeout, append(bad.args, "--nats", svc.natsURL)...), bad.want)
	}
	// Nothing was queued anywhere.
	ctx, cancel := opCtx()
	defer cancel()
	s, err := svc.js.Stream(ctx, bus.DefaultNamespace.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("DLQ holds %d messages, want 0", info.State.Msgs)
	}
}

// TestSubmitWaitWithoutCoordinator: `submit --wait` on a fleet without a
// coordinator says, once the job has gone a while without progress, that
// no coordinator has taken it and it stays queued; status says the same.
func TestSubmitWaitWithoutCoordinator(t *testing.T) {
	svc := startServices(t, false)
	sub := startProc(t, "submit", "submit", "--nats", svc.natsURL, "--disks", "3", "--k", "1", "--job-id", "lonely",
		"--wait", "--queued-notice", "500ms")
	const notice = "default/lonely is still queued after 500ms: no coordinator has taken it yet; it stays queued until a coordinator takes it"
	waitFor(t, 30*time.Second, "the queued notice", func() bool { return strings.Contains(sub.stderr(), notice) }, sub)
	if !strings.Contains(sub.stderr(), svc.natsURL) {
		t.Errorf("the notice does not name the NATS server: %q", sub.stderr())
	}
	if res := svc.maker(t, cli.ExitOK, "status", "lonely"); res.stdout != "default/lonely: queued: no coordinator has taken it yet\n" {
		t.Errorf("status of the queued job printed %q, want why it is queued", res.stdout)
	}
	sub.signal(syscall.SIGINT)
	checkInterrupted(t, sub)
	if strings.Count(sub.stderr(), "still queued") != 1 {
		t.Errorf("the notice came more than once: %q", sub.stderr())
	}
}
