package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// TestJobRef: a JOB argument is id or tenant/id; anything else is refused
// with a message that says which part is wrong and how. A tenant/id naming
// another tenant than a --tenant given is refused (finding 4: it used to
// override --tenant silently).
func TestJobRef(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		arg, tenant  string
		tenantSet    bool
		wantT, wantJ string
		wantErr      string
	}{
		{arg: "j1", tenant: "default", wantT: "default", wantJ: "j1"},
		{arg: "acme/j1", tenant: "default", wantT: "acme", wantJ: "j1"},
		{arg: "acme/j1", tenant: "acme", tenantSet: true, wantT: "acme", wantJ: "j1"},
		{arg: "j1", tenant: "acme", tenantSet: true, wantT: "acme", wantJ: "j1"},
		{arg: "alpha/j1", tenant: "beta", tenantSet: true, wantErr: `JOB "alpha/j1" names tenant "alpha", but --tenant is "beta"`},
		{arg: "default/j1", tenant: "default", tenantSet: true, wantT: "default", wantJ: "j1"},
		{arg: "no spaces", tenant: "default", wantErr: `invalid job id "no spaces": want 1-64 characters`},
		{arg: "acme/", tenant: "default", wantErr: `invalid job id "": want 1-64 characters`},
		{arg: "Upper/j1", tenant: "default", wantErr: `invalid tenant "Upper": want 1-32 characters`},
		{arg: "j1", tenant: "Bad_Tenant", wantErr: `invalid tenant "Bad_Tenant"`},
		{arg: "a/b/c", tenant: "default", wantErr: `invalid JOB "a/b/c": JOB is id or tenant/id`},
		{arg: "a//c", tenant: "default", wantErr: `invalid JOB "a//c": JOB is id or tenant/id`},
	} {
		tenant, job, err := jobRef(tc.arg, tc.tenant, tc.tenantSet)
		if tc.wantErr == "" {
			if err != nil || tenant != tc.wantT || job != tc.wantJ {
				t.Errorf("jobRef(%q, %q) = %q, %q, %v; want %q, %q", tc.arg, tc.tenant, tenant, job, err, tc.wantT, tc.wantJ)
			}
			continue
		}
		var ue usageError
		if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) || !errors.As(err, &ue) {
			t.Errorf("jobRef(%q, %q) = %v; want a usage error starting %q", tc.arg, tc.tenant, err, tc.wantErr)
		}
	}
}

// TestControlMessages: pause, resume and cancel say when the job already
// is as asked (and change nothing), and status names no coordinator for a
// paused job.
func TestControlMessages(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	ctx := t.Context()
	topo, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	// put registers job id in state and control, with a coordinator's last
	// status naming c1 if it ran.
	put := func(id, state, control string, ran bool) {
		t.Helper()
		spec := schemas.JobSpec{Header: schemas.NewHeader(schemas.KindJobSpec), Tenant: "default", JobID: id,
			Task: "hanoi", Params: json.RawMessage(`{"disks":3}`), K: 1}
		if err := jobs.Prepare(context.Background(), &spec, taskreg.New(nil, builtin.Registry(), taskspec.CompileSpec)); err != nil {
			t.Fatal(err)
		}
		rec := schemas.JobRecord{Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: "default", JobID: id, Spec: spec,
			Control: control, State: state, UpdatedAt: time.Now().UTC()}
		if err := jobs.Register(ctx, topo, &rec); err != nil {
			t.Fatal(err)
		}
		if !ran {
			return
		}
		st := schemas.JobStatus{Header: schemas.NewHeader(schemas.KindJobStatus), Tenant: "default", JobID: id,
			State: schemas.StateRunning, Steps: 2, TotalSteps: 7, Coordinator: "c1", UpdatedAt: time.Now().UTC()}
		data, err := schemas.Encode(&st)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topo.Status.Put(ctx, bus.JobKey("default", id), data); err != nil {
			t.Fatal(err)
		}
	}
	put("paused", schemas.StatePaused, schemas.ControlPause, true)
	put("running", schemas.StateRunning, schemas.ControlRun, true)
	put("queued", schemas.StateQueued, schemas.ControlRun, false)
	put("pausing", schemas.StateRunning, schemas.ControlPause, true)
	put("cancelling", schemas.StateRunning, schemas.ControlCancel, true)
	put("resuming", schemas.StatePaused, schemas.ControlRun, true)

	for _, tc := range []struct {
		cmd, job, want string
		changes        bool
	}{
		{"pause", "paused", "default/paused: already paused\n", false},
		{"resume", "running", "default/running: already running\n", false},
		{"resume", "queued", "default/queued: not paused (the job is queued)\n", false},
		{"pause", "pausing", "default/pausing: pause already asked (the job is running; it pauses at the next step boundary)\n", false},
		{"cancel", "cancelling", "default/cancelling: cancel already asked (the job is running; it ends at the next step boundary)\n", false},
		{"resume", "resuming", "default/resuming: resume already asked (the job is paused; a coordinator picks it up where it stopped)\n", false},
		{"pause", "running", "default/running: pause asked (the job is running; it takes effect at the next step boundary)\n", true},
		{"resume", "paused", "default/paused: resume asked (the job is paused; it takes effect at the next step boundary)\n", true},
	} {
		_, before, err := jobs.Get(ctx, topo, "default", tc.job)
		if err != nil {
			t.Fatal(err)
		}
		res := runMain(t, tc.cmd, tc.job, "--nats", srv.URL)
		if res.code != ExitOK || res.stdout != tc.want || res.stderr != "" {
			t.Errorf("maker %s %s: exit %d, stdout %q, stderr %q; want exit 0 and %q", tc.cmd, tc.job, res.code, res.stdout, res.stderr, tc.want)
		}
		if _, after, _ := jobs.Get(ctx, topo, "default", tc.job); (after != before) != tc.changes {
			t.Errorf("maker %s %s: record revision %d -> %d, want a change: %v", tc.cmd, tc.job, before, after, tc.changes)
		}
	}

	// The paused job was resumed above; pause it again as its coordinator
	// would have left it.
	put("paused-2", schemas.StatePaused, schemas.ControlPause, true)
	res := runMain(t, "status", "paused-2", "--nats", srv.URL)
	if res.code != ExitOK || res.stdout != "default/paused-2: paused, step 2 of 7 (0.0%), 0 samples, 0 errors\n" {
		t.Errorf("status of a paused job: exit %d, %q; want it paused (no pause left to ask) on no coordinator", res.code, res.stdout)
	}
	res = runMain(t, "status", "paused-2", "--json", "--nats", srv.URL)
	var st schemas.JobStatus
	if err := json.Unmarshal([]byte(res.stdout), &st); err != nil || st.Coordinator != "" || st.Control != "" {
		t.Errorf("status --json of a paused job: %q, %v; want coordinator and control empty", res.stdout, err)
	}
	if res := runMain(t, "status", "running", "--nats", srv.URL); !strings.Contains(res.stdout, ", on c1") {
		t.Errorf("status of the running job: %q, want it to name its coordinator", res.stdout)
	}
}

// putJob registers tenant/id in state and control, and, when status is
// set, stores it as the job's last status (as its owner left it).
func putJob(t *testing.T, topo *topology.Topology, tenant, id, state, control string, status *schemas.JobStatus) {
	t.Helper()
	ctx := t.Context()
	spec := schemas.JobSpec{Header: schemas.NewHeader(schemas.KindJobSpec), Tenant: tenant, JobID: id,
		Task: "hanoi", Params: json.RawMessage(`{"disks":4}`), K: 1}
	if err := jobs.Prepare(context.Background(), &spec, taskreg.New(nil, builtin.Registry(), taskspec.CompileSpec)); err != nil {
		t.Fatal(err)
	}
	rec := schemas.JobRecord{Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: tenant, JobID: id, Spec: spec,
		Control: control, State: state, UpdatedAt: time.Now().UTC()}
	if err := jobs.Register(ctx, topo, &rec); err != nil {
		t.Fatal(err)
	}
	if status == nil {
		return
	}
	st := *status
	st.Header, st.Tenant, st.JobID, st.TotalSteps, st.UpdatedAt = schemas.NewHeader(schemas.KindJobStatus), tenant, id, 15, time.Now().UTC()
	data, err := schemas.Encode(&st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Status.Put(ctx, bus.JobKey(tenant, id), data); err != nil {
		t.Fatal(err)
	}
}

// TestLifecycleTenantScoping (finding 4): a JOB naming another tenant than
// --tenant is refused before anything is asked; jobs list and dlq list show
// only --tenant's (default "default") unless --all-tenants.
func TestLifecycleTenantScoping(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	topo, err := topology.Ensure(t.Context(), js, topology.Config{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	putJob(t, topo, "default", "j1", schemas.StateQueued, schemas.ControlRun, nil)
	putJob(t, topo, "beta", "j2", schemas.StateQueued, schemas.ControlRun, nil)
	_, rev0, _ := jobs.Get(t.Context(), topo, "beta", "j2")

	const mismatch = `maker: JOB "beta/j2" names tenant "beta", but --tenant is "default"`
	for _, args := range [][]string{
		{"status", "beta/j2", "--tenant", "default"},
		{"result", "beta/j2", "--tenant", "default"},
		{"pause", "beta/j2", "--tenant", "default"},
		{"cancel", "beta/j2", "--tenant", "default", "--json"},
		{"decide", "beta/j2", "--tenant", "default", "--step", "0", "--vote", "x"},
	} {
		res := runMain(t, append(args, "--nats", srv.URL)...)
		if res.code != ExitUsage || res.stdout != "" || !strings.HasPrefix(res.stderr, mismatch) {
			t.Errorf("maker %v: exit %d, stdout %q, stderr %q; want exit %d and %q", args, res.code, res.stdout, res.stderr, ExitUsage, mismatch)
		}
	}
	if _, rev, _ := jobs.Get(t.Context(), topo, "beta", "j2"); rev != rev0 {
		t.Errorf("a refused command wrote beta/j2's record")
	}
	if res := runMain(t, "status", "beta/j2", "--tenant", "beta", "--nats", srv.URL); res.code != ExitOK {
		t.Errorf("status beta/j2 --tenant beta: exit %d, %s", res.code, res.stderr)
	}
	if res := runMain(t, "status", "beta/j2", "--nats", srv.URL); res.code != ExitOK {
		t.Errorf("status beta/j2 (no --tenant): exit %d, %s", res.code, res.stderr)
	}

	list := func(args ...string) []string {
		t.Helper()
		res := runMain(t, append(append([]string{"jobs", "list", "--json"}, args...), "--nats", srv.URL)...)
		var rows []struct {
			Tenant string `json:"tenant"`
			JobID  string `json:"job_id"`
		}
		if res.code != ExitOK || json.Unmarshal([]byte(res.stdout), &rows) != nil || rows == nil {
			t.Fatalf("jobs list %v: exit %d, %q, %s", args, res.code, res.stdout, res.stderr)
		}
		var out []string
		for _, r := range rows {
			out = append(out, r.Tenant+"/"+r.JobID)
		}
		return out
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "default/j1"},
		{[]string{"--tenant", "beta"}, "beta/j2"},
		{[]string{"--tenant", "nobody"}, ""},
		{[]string{"--all-tenants"}, "default/j1 beta/j2"},
	} {
		if got := strings.Join(list(tc.args...), " "); got != tc.want {
			t.Errorf("jobs list %v = %q, want %q", tc.args, got, tc.want)
		}
	}
	for _, args := range [][]string{
		{"jobs", "list", "--all-tenants", "--tenant", "beta"},
		{"dlq", "list", "--all-tenants", "--tenant", "beta"},
		{"dlq", "list", "--tenant", ""},
	} {
		if res := runMain(t, append(args, "--nats", srv.URL)...); res.code != ExitUsage {
			t.Errorf("maker %v: exit %d, want %d", args, res.code, ExitUsage)
		}
	}
	for _, args := range [][]string{{"dlq", "list", "--json"}, {"dlq", "list", "--json", "--all-tenants"}, {"dlq", "list", "--json", "--tenant", "beta"}} {
		if res := runMain(t, append(args, "--nats", srv.URL)...); res.code != ExitOK || strings.TrimSpace(res.stdout) != "[]" {
			t.Errorf("maker %v: exit %d, %q, %s; want []", args, res.code, res.stdout, res.stderr)
		}
	}
}

// TestDecideCommand (finding 4): maker decide is taken only for the step a
// job waits for a person at; a paused healthy job, a step far beyond the
// open one and an unknown job are refused, with nothing written. Both
// ways give the same answers: through a coordinator's decide service, and,
// with no coordinator running (no responders), written to the registry
// directly with the same checks.
func TestDecideCommand(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"coordinator", "registry"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			env := fleettest.New(t)
			var asked atomic.Int64
			if via == "coordinator" {
				env.StartCoordinator(coordinator.Config{})
				fleettest.Eventually(t, 10*time.Second, func() bool {
					_, err := jobs.Ask(t.Context(), env.NC, env.Bus.Namespace, "default", "nope", schemas.ControlRequest{Action: schemas.ActionPause})
					return errors.Is(err, jobs.ErrNotFound)
				}, "the coordinator's control service never answered")
				// A bystander (not a responder) sees that the requests
				// went to the service.
				sub, err := env.NC.Subscribe(env.Bus.Namespace.DecideWildcard(), func(*nats.Msg) { asked.Add(1) })
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sub.Unsubscribe() })
				if err := env.NC.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			// Paused jobs: no coordinator takes them.
			putJob(t, env.Topo, "default", "healthy", schemas.StatePaused, schemas.ControlPause,
				&schemas.JobStatus{State: schemas.StatePaused, Steps: 2})
			putJob(t, env.Topo, "default", "person", schemas.StatePaused, schemas.ControlPause,
				&schemas.JobStatus{State: schemas.StatePaused, Steps: 2, Rung: schemas.RungPanel})
			url := env.NATS.URL
			for _, tc := range []struct {
				job, step string
				code      int
				says      string
			}{
				{"healthy", "2", ExitUsage, "step 2 of default/healthy is being voted on (the job is paused"},
				{"person", "1099511627776", ExitUsage, "step 1099511627776 of default/person has not been reached (the job is at step 2)"},
				{"person", "1", ExitUsage, "step 1 of default/person was decided already"},
				{"nope", "0", ExitError, "unknown job: default/nope (looked in tenant default; a job of another tenant is TENANT/nope"},
			} {
				res := runMain(t, "decide", tc.job, "--step", tc.step, "--vote", `{"move":[1,0,2]}`, "--by", "mallory", "--nats", url)
				if res.code != tc.code || res.stdout != "" || !strings.Contains(res.stderr, tc.says) {
					t.Errorf("decide %s --step %s: exit %d, stdout %q, stderr %q; want exit %d saying %q", tc.job, tc.step, res.code, res.stdout, res.stderr, tc.code, tc.says)
				}
			}
			for _, id := range []string{"healthy", "person"} {
				if rec, _, err := jobs.Get(t.Context(), env.Topo, "default", id); err != nil || rec.Decision != nil || rec.Control != schemas.ControlPause {
					t.Errorf("%s after the refusals: %+v, %v; want no decision, still paused", id, rec, err)
				}
			}
			res := runMain(t, "decide", "person", "--step", "2", "--vote", `{"move":[1,0,2]}`, "--by", "alice", "--json", "--nats", url)
			var d schemas.PersonDecision
			if res.code != ExitOK || json.Unmarshal([]byte(res.stdout), &d) != nil || d.Step != 2 || d.By != "alice" || d.At.IsZero() {
				t.Fatalf("decide the waiting step: exit %d, %q, %s", res.code, res.stdout, res.stderr)
			}
			if rec, _, err := jobs.Get(t.Context(), env.Topo, "default", "person"); err != nil || rec.Decision == nil || rec.Decision.Step != 2 {
				t.Errorf("record after decide: %+v, %v; want the decision for step 2", rec, err)
			}
			if n := asked.Load(); via == "coordinator" && n != 5 {
				t.Errorf("%d decide requests seen on the service's subjects, want 5", n)
			}
		})
	}
}
