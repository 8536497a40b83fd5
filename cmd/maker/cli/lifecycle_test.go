package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
)

// TestJobRef: a JOB argument is id or tenant/id; anything else is refused
// with a message that says which part is wrong and how.
func TestJobRef(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		arg, tenant  string
		wantT, wantJ string
		wantErr      string
	}{
		{arg: "j1", tenant: "default", wantT: "default", wantJ: "j1"},
		{arg: "acme/j1", tenant: "default", wantT: "acme", wantJ: "j1"},
		{arg: "no spaces", tenant: "default", wantErr: `invalid job id "no spaces": want 1-64 characters`},
		{arg: "acme/", tenant: "default", wantErr: `invalid job id "": want 1-64 characters`},
		{arg: "Upper/j1", tenant: "default", wantErr: `invalid tenant "Upper": want 1-32 characters`},
		{arg: "j1", tenant: "Bad_Tenant", wantErr: `invalid tenant "Bad_Tenant"`},
		{arg: "a/b/c", tenant: "default", wantErr: `invalid JOB "a/b/c": JOB is id or tenant/id`},
		{arg: "a//c", tenant: "default", wantErr: `invalid JOB "a//c": JOB is id or tenant/id`},
	} {
		tenant, job, err := jobRef(tc.arg, tc.tenant)
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
	topo, err := bus.Ensure(ctx, js, bus.Config{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	// put registers job id in state and control, with a coordinator's last
	// status naming c1 if it ran.
	put := func(id, state, control string, ran bool) {
		t.Helper()
		spec := schemas.JobSpec{Header: schemas.NewHeader(schemas.KindJobSpec), Tenant: "default", JobID: id,
			Task: "hanoi", Params: json.RawMessage(`{"disks":3}`), K: 1}
		if err := jobs.Prepare(context.Background(), &spec, taskreg.New(nil, builtin.Registry())); err != nil {
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

	for _, tc := range []struct {
		cmd, job, want string
		changes        bool
	}{
		{"pause", "paused", "default/paused: already paused\n", false},
		{"resume", "running", "default/running: already running\n", false},
		{"resume", "queued", "default/queued: not paused (the job is queued)\n", false},
		{"pause", "pausing", "default/pausing: pause already asked (the job is running; it pauses at the next step boundary)\n", false},
		{"cancel", "cancelling", "default/cancelling: cancel already asked (the job is running; it ends at the next step boundary)\n", false},
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
