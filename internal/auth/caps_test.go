package auth_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
	"github.com/makerfleet/makerfleet/voter"
)

// TestVoterForgesOnlyItsOwnSample: on a secured fleet, a hostile process
// holding a voter's credentials (finding 2 of issue 19) does what a voter
// may: it pulls one sample request from the voters' consumer, hands it
// back, and publishes results voting a wrong answer for every index of
// the wave (fleettest.Forger: no token under the honest answers' old
// message ids, guessed tokens, its own request's token). The server
// refuses it nothing; the coordinator drops every forgery as forged. The
// honest voter (answering once the forgeries are in) decides each step:
// the job solves with the golden trace and the report counts the
// forgeries.
func TestVoterForgesOnlyItsOwnSample(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed = 3, 2, 43
	const steps = 1<<disks - 1
	srv := authtest.Start(t)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	busCfg := topology.Config{Storage: jetstream.MemoryStorage}
	tasks := builtin.Registry()
	coordConn := srv.Connect(t, auth.Coordinator)
	voterConn := srv.Connect(t, auth.Voter)
	hostile := srv.Connect(t, auth.Voter) // a voter's leaked credentials
	admin := srv.Connect(t, auth.Admin)   // submits the job, reads the report

	runCoordinator(t, coordConn, busCfg, tasks, log)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adminJS, topo := openTopology(ctx, t, admin, busCfg)

	// The honest voter takes one request at a time and answers a step
	// under attack only once the forgeries are in the stream.
	ambush := fleettest.NewAmbush(0, 4)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, steps, 64), ambush.Script(func(_ context.Context, c fleettest.Call) (llm.Response, error) {
		return fleettest.Right(c), nil
	}))
	vo, err := voter.New(voterConn.Conn, model, voter.Config{
		ID: "voter-1", Tasks: tasks, Bus: busCfg, Concurrency: 1, Model: "fake",
		DrainTimeout: 5 * time.Second, ModelErrorDelay: 20 * time.Millisecond, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	runRole(t, "voter", vo.Run)

	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	if err := jobs.Prepare(ctx, &spec, taskreg.New(nil, tasks, taskspec.CompileSpec)); err != nil {
		t.Fatal(err)
	}
	data, err := schemas.Encode(&spec)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: busCfg.Namespace.JobSubject(spec.Tenant), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, spec.Tenant+"/"+spec.JobID)
	if _, err := adminJS.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("submit: %v", err)
	}

	hostileJS, err := jetstream.New(hostile.Conn)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := ambush.Strike(ctx, fleettest.Forger{JS: hostileJS, NS: busCfg.Namespace}, disks, k)
	if err != nil {
		t.Fatalf("the hostile voter, doing what a voter may: %v", err)
	}

	rep, err := jobs.Wait(ctx, topo, spec.Tenant, spec.JobID, nil)
	if err != nil {
		t.Fatalf("the report: %v", err)
	}
	if rep.State != schemas.StateSolved || rep.TraceSHA256 != fleettest.GoldenTrace(disks) || rep.Errors != 0 {
		t.Errorf("state %s (%s), trace %s, errors %d: want solved with the golden trace", rep.State, rep.Reason, rep.TraceSHA256, rep.Errors)
	}
	if rep.ForgedResults != int64(forged) || rep.Samples != steps*k || rep.Votes != steps*k {
		t.Errorf("forged_results %d of %d forgeries, samples %d, votes %d: want every forgery dropped and %d honest votes",
			rep.ForgedResults, forged, rep.Samples, rep.Votes, steps*k)
	}
	// The attack needs nothing a voter may not do; the honest roles were
	// refused nothing either.
	for _, c := range []*authtest.Conn{coordConn, voterConn, hostile} {
		for _, v := range c.Violations() {
			t.Errorf("%s was refused: %v", c.Identity, v)
		}
	}
}

// runCoordinator runs a coordinator on conn (the coordinator identity),
// its store on a redis-server of its own, until cleanup.
func runCoordinator(t *testing.T, conn *authtest.Conn, busCfg topology.Config, tasks *task.Registry, log *slog.Logger) {
	t.Helper()
	st, err := store.New(testkit.StartRedis(t).Client(t), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A message a sample: the forger of TestForgedResultsSecured pulls
	// one sample of a wave and forges its others, whose tokens it was
	// never handed (a wave in one request hands its holder all of them).
	co, err := coordinator.New(conn.Conn, st, coordinator.Config{ID: "coordinator-1", Tasks: tasks, Bus: busCfg, Logger: log, SamplesPerCall: 1})
	if err != nil {
		t.Fatal(err)
	}
	runRole(t, "coordinator", co.Run)
}

// openTopology waits until conn sees the topology the coordinator alone
// makes (the others bind to it), and returns conn's JetStream and it.
func openTopology(ctx context.Context, t *testing.T, conn *authtest.Conn, busCfg topology.Config) (jetstream.JetStream, *topology.Topology) {
	t.Helper()
	js, err := jetstream.New(conn.Conn)
	if err != nil {
		t.Fatal(err)
	}
	var topo *topology.Topology
	testkit.Eventually(t, 30*time.Second, func() bool {
		topo, err = topology.Open(ctx, js, busCfg)
		return err == nil
	}, "%s never saw the coordinator's topology: %v", conn.Identity, err)
	return js, topo
}
