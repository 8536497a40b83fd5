package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
	"github.com/makerfleet/makerfleet/voter"
)

// golden are the figures coordinator/testdata/golden.json holds for its
// "odd disks" case (5 disks, k 2, seed 7, accuracy 0.9).
type golden struct {
	State       string `json:"state"`
	Steps       int64  `json:"steps"`
	Errors      int64  `json:"errors"`
	TraceSHA256 string `json:"trace_sha256"`
	Samples     int64  `json:"samples"`
	Votes       int64  `json:"votes"`
}

func readGolden(t *testing.T, name string) golden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "coordinator", "testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]golden
	if err := json.Unmarshal(data, &all); err != nil {
		t.Fatal(err)
	}
	g, ok := all[name]
	if !ok {
		t.Fatalf("no golden case %q", name)
	}
	return g
}

// runRole runs fn until cleanup, failing the test if it stops with an
// error on its own.
func runRole(t *testing.T, name string, fn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }() // owned: stopped and awaited at cleanup
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}

// TestAuthFleetGolden runs a job on a fleet whose every role is on its own
// identity, with the least privilege auth.conf grants: the job ends with
// the golden trace, no role is refused anything, and the api identity
// (maker serve, which submits for tenants) forging results under the
// genuine replies' message ids (finding 1) is refused by the server, so
// its forgeries never reach the results stream.
func TestAuthFleetGolden(t *testing.T) {
	t.Parallel()
	want := readGolden(t, "odd disks")
	srv := authtest.Start(t)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	busCfg := topology.Config{Storage: jetstream.MemoryStorage}
	tasks := builtin.Registry()

	coordConn := srv.Connect(t, auth.Coordinator)
	voterConn := srv.Connect(t, auth.Voter)
	alpha := srv.Connect(t, auth.API)   // submits alpha's job, as maker serve does
	admin := srv.Connect(t, auth.Admin) // only watches what is delivered

	runCoordinator(t, coordConn, busCfg, tasks, log)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alphaJS, topo := openTopology(ctx, t, alpha, busCfg)

	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 0.9, Seed: 7})
	vo, err := voter.New(voterConn.Conn, fleettest.SimClient(t, sim, llm.Config{}), voter.Config{
		ID: "voter-1", Tasks: tasks, Bus: busCfg, Concurrency: 16, Model: simllm.DefaultModel,
		DrainTimeout: 5 * time.Second, ModelErrorDelay: 20 * time.Millisecond, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	runRole(t, "voter", vo.Run)

	// The forger: for each sample request (seen here through the admin,
	// as an attacker reading the bus would), the api publishes a wrong
	// vote under the id the genuine reply will carry.
	var (
		forgedMu sync.Mutex
		forged   []string
	)
	sub, err := admin.Subscribe(busCfg.Namespace.SampleSubject("*", "*"), func(m *nats.Msg) {
		var req schemas.SampleRequest
		if err := schemas.Decode(m.Data, &req); err != nil {
			return
		}
		res := schemas.SampleResult{
			Header: schemas.NewHeader(schemas.KindSampleResult), Tenant: req.Tenant, JobID: req.JobID,
			SampleID: req.SampleID, Step: req.Step, Epoch: req.Epoch, Index: req.Index, Attempt: req.Attempt,
			Outcome: "vote", VoteKey: `{"move":[9,9,9]}`, VoterID: "forger",
		}
		data, _ := json.Marshal(&res)
		subj := busCfg.Namespace.ResultSubject(req.Tenant, req.JobID, schemas.EpochGen(req.Epoch))
		out := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{}}
		out.Header.Set(jetstream.MsgIDHeader, req.SampleID+"/r1")
		_ = alpha.PublishMsg(out)
		forgedMu.Lock()
		forged = append(forged, subj)
		forgedMu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	var counted sync.Map // forged results delivered to anyone: none may be
	rsub, err := admin.Subscribe(busCfg.Namespace.ResultJobWildcard("*", "*"), func(m *nats.Msg) {
		var res schemas.SampleResult
		if json.Unmarshal(m.Data, &res) == nil && res.VoterID == "forger" {
			counted.Store(m.Header.Get(jetstream.MsgIDHeader), true)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rsub.Unsubscribe() }()
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}

	spec := fleettest.HanoiSpec(5, 2, 7)
	spec.Tenant = "alpha"
	if err := jobs.Prepare(ctx, &spec, taskreg.New(nil, tasks, taskspec.CompileSpec)); err != nil {
		t.Fatal(err)
	}
	data, err := schemas.Encode(&spec)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: busCfg.Namespace.JobSubject("alpha"), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, spec.Tenant+"/"+spec.JobID)
	if _, err := alphaJS.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("the api submits alpha's job: %v", err)
	}
	rep, err := jobs.Wait(ctx, topo, "alpha", spec.JobID, nil)
	if err != nil {
		t.Fatalf("the api waits for alpha's report: %v", err)
	}
	got := golden{State: rep.State, Steps: rep.Steps, Errors: rep.Errors, TraceSHA256: rep.TraceSHA256, Samples: rep.Samples, Votes: rep.Votes}
	if got != want {
		t.Errorf("secured fleet's job:\n got %+v\nwant %+v (coordinator/testdata/golden.json)", got, want)
	}

	forgedMu.Lock()
	n := len(forged)
	first := ""
	if n > 0 {
		first = forged[0]
	}
	forgedMu.Unlock()
	if n == 0 {
		t.Fatal("the forger saw no sample request")
	}
	if v := alpha.WaitViolation(first, 10*time.Second); !errors.Is(v, bus.ErrPermission) {
		t.Errorf("the server did not refuse the api's forged result on %s (violation %v)", first, v)
	}
	counted.Range(func(k, _ any) bool {
		t.Errorf("forged result %v reached the results subject", k)
		return true
	})
	// Least privilege is enough: the roles were refused nothing.
	for _, c := range []*authtest.Conn{coordConn, voterConn} {
		for _, v := range c.Violations() {
			t.Errorf("%s was refused: %v", c.Identity, v)
		}
	}
	for _, v := range alpha.Violations() {
		if !errors.Is(v, bus.ErrPermission) || !containsAny(v.Error(), forged) {
			t.Errorf("the api was refused something other than its forgeries: %v", v)
		}
	}
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if len(s) >= len(x) && (s[len(s)-len(x):] == x) {
			return true
		}
	}
	return false
}

// testWriter writes logs to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
