package auth_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/app/judgetest"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
)

// TestCheckReply (issue 19, item 9): on a secured fleet a service answers
// only under the inbox of an identity whose permissions let it publish
// the request; without identities, any literal inbox.
func TestCheckReply(t *testing.T) {
	t.Parallel()
	ns := bus.DefaultNamespace
	control, decide := "maker.v1.control.alpha.j1", "maker.v1.decide.alpha.j1"
	approve := ns.JudgeApproveSubject(auth.Approver)
	for _, tc := range []struct {
		name, subject, reply string
		secured, ok          bool
	}{
		{"control from the api", control, "_INBOX.api.a1.b2", true, true},
		{"control from the admin", control, "_INBOX.admin.x", true, true},
		{"control to a former tenant identity", control, "_INBOX.tenant-alpha.x", true, false},
		{"control to the approver", control, "_INBOX.approver.x", true, false},
		{"control to a voter", control, "_INBOX.voter.x", true, false},
		{"control to the coordinator", control, "_INBOX.coordinator.x", true, false},
		{"control to no identity", control, "_INBOX.nobody.x", true, false},
		{"control to the default inbox", control, "_INBOX.Jb0x9zQ1.1", true, false},
		{"decide from the approver", decide, "_INBOX.approver.x", true, true},
		{"decide from the api", decide, "_INBOX.api.x", true, true},
		{"decide from the admin", decide, "_INBOX.admin.x", true, true},
		{"decide to a tenant", decide, "_INBOX.tenant-alpha.x", true, false},
		{"decide to a voter", decide, "_INBOX.voter.x", true, false},
		{"approval from the approver", approve, "_INBOX.approver.x", true, true},
		{"approval to the api", approve, "_INBOX.api.x", true, false},
		{"approval to a tenant", approve, "_INBOX.tenant-alpha.x", true, false},
		{"approval to the judge", approve, "_INBOX.judge.x", true, false},
		{"a KV key", control, "$KV.maker_jobs.beta.j1", true, false},
		{"a wildcard", control, "_INBOX.api.*", true, false},
		{"no reply", control, "", true, false},
		{"unsecured: any inbox", control, "_INBOX.Jb0x9zQ1.1", false, true},
		{"unsecured: another's inbox", control, "_INBOX.approver.x", false, true},
		{"unsecured: not an inbox", control, "$KV.maker_jobs.beta.j1", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := auth.CheckReply(ns, tc.secured, tc.subject, tc.reply)
			if tc.ok && err != nil {
				t.Errorf("CheckReply = %v, want allowed", err)
			}
			if !tc.ok && !errors.Is(err, auth.ErrReply) {
				t.Errorf("CheckReply = %v, want ErrReply", err)
			}
		})
	}
}

// TestMayPublish: the subject match follows the server's: '*' one token,
// '>' one or more, Deny over Allow.
func TestMayPublish(t *testing.T) {
	t.Parallel()
	p := auth.Permissions{Publish: auth.Rules{Allow: []string{"a.*.c", "b.>"}, Deny: []string{"b.x.>"}}}
	for subject, want := range map[string]bool{
		"a.b.c": true, "a.b": false, "a.b.c.d": false, "a..c": true,
		"b.y": true, "b.y.z": true, "b": false, "b.x": true, "b.x.y": false, "c": false,
	} {
		if got := p.MayPublish(subject); got != want {
			t.Errorf("MayPublish(%q) = %v, want %v", subject, got, want)
		}
	}
}

// TestAuthReplyOwnInbox (issue 19, item 9): on a secured fleet a control
// request from the api whose reply names the approver's inbox is neither
// answered (nothing arrives in that inbox) nor acted on (the job is not
// paused); the same request with the api's own inbox is answered. The
// judge refuses an approval whose reply names the api's inbox the same
// way: the held call stays pending.
func TestAuthReplyOwnInbox(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	busCfg := topology.Config{Storage: jetstream.MemoryStorage}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	st, err := store.New(testkit.StartRedis(t).Client(t), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	co, err := coordinator.New(srv.Connect(t, auth.Coordinator).Conn, st, coordinator.Config{ID: "coordinator-1",
		Tasks: builtin.Registry(), Bus: busCfg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runRole(t, "coordinator", co.Run)
	api := srv.Connect(t, auth.API)
	apiJS, err := jetstream.New(api.Conn)
	if err != nil {
		t.Fatal(err)
	}
	var topo *topology.Topology
	testkit.Eventually(t, 30*time.Second, func() bool {
		topo, err = topology.Open(ctx, apiJS, busCfg)
		return err == nil
	}, "the api never saw the coordinator's topology: %v", err)
	spec := schemas.JobSpec{Header: schemas.NewHeader(schemas.KindJobSpec), Tenant: "acme", JobID: "j1", Task: "hanoi",
		Params: []byte(`{"disks": 3}`), K: 2}
	spec.ApplyDefaults()
	rec := schemas.JobRecord{Header: schemas.NewHeader(schemas.KindJobRecord), Tenant: "acme", JobID: "j1", Spec: spec,
		Control: schemas.ControlPause, State: schemas.StatePaused, UpdatedAt: time.Now().UTC()}
	if err := jobs.Register(ctx, topo, &rec); err != nil {
		t.Fatal(err)
	}
	// The coordinators' control service is up once it answers the api.
	testkit.Eventually(t, 30*time.Second, func() bool {
		_, err := jobs.Ask(ctx, api.Conn, topo.NS, "acme", "j0", schemas.ControlRequest{Action: schemas.ActionPause})
		return errors.Is(err, jobs.ErrNotFound)
	}, "the coordinator never served controls")
	approver := srv.Connect(t, auth.Approver)
	stolen, err := approver.SubscribeSync("_INBOX.approver.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := approver.Flush(); err != nil {
		t.Fatal(err)
	}
	// The api resumes the paused job, naming the approver's inbox.
	data, err := schemas.Encode(&schemas.ControlRequest{Header: schemas.NewHeader(schemas.KindControlRequest), Action: schemas.ActionResume})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.PublishMsg(&nats.Msg{Subject: topo.NS.ControlSubject("acme", "j1"), Reply: "_INBOX.approver.stolen", Data: data}); err != nil {
		t.Fatal(err)
	}
	// Requests on one subscription are handled in order: once the api's
	// own request (another job) is answered, the first one was handled.
	if _, err := jobs.Ask(ctx, api.Conn, topo.NS, "acme", "j2", schemas.ControlRequest{Action: schemas.ActionPause}); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("the api's own request: %v, want ErrNotFound (answered)", err)
	}
	if m, err := stolen.NextMsg(50 * time.Millisecond); err == nil {
		t.Errorf("the coordinator answered in the approver's inbox: %q", m.Data)
	}
	if got, _, err := jobs.Get(ctx, topo, "acme", "j1"); err != nil || got.Control != schemas.ControlPause {
		t.Errorf("after the request with another's inbox the job's control is %q (err %v), want it still paused", got.Control, err)
	}

	// The judge: a held call, and an approval whose reply is the api's.
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 1, Seed: 1})
	jc := srv.Connect(t, auth.Judge)
	jjs, err := jetstream.New(jc.Conn)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := judge.New(ctx, jjs, judge.Config{Settings: judgetest.TestSettings(), BaseURL: sim.URL(), Concurrency: 2,
		SoftStop: 5 * time.Second, Storage: jetstream.MemoryStorage, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := sv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sv.Stop)
	admin := srv.Connect(t, auth.Admin)
	adminJS, err := jetstream.New(admin.Conn)
	if err != nil {
		t.Fatal(err)
	}
	approvals, err := adminJS.KeyValue(ctx, topo.NS.JudgeApprovalsBucket())
	if err != nil {
		t.Fatal(err)
	}
	held := &schemas.BreakGlassApproval{Header: schemas.NewHeader(schemas.KindBreakGlassApproval), RequestID: "held-1",
		Tenant: "acme", Session: "s1", State: schemas.ApprovalPending, Reason: "over budget",
		Request: judgetest.Request("held-1", "s1", "redesign the module boundaries"), RequestedAt: time.Now().UTC()}
	heldData, err := schemas.Encode(held)
	if err != nil {
		t.Fatal(err)
	}
	key := bus.JudgeApprovalKey("acme", "held-1")
	if _, err := approvals.Create(ctx, key, heldData); err != nil {
		t.Fatal(err)
	}
	// The judge's approvals service is up once it answers the approver.
	testkit.Eventually(t, 30*time.Second, func() bool {
		_, err := judgeclient.Decide(ctx, approver.Conn, topo.NS, auth.Approver, &schemas.ApprovalDecision{
			RequestID: "none-yet", Decision: schemas.DecisionDeny, By: "bob"})
		return errors.Is(err, judgeclient.ErrNotPending)
	}, "the judge never served approvals")
	apiInbox, err := api.SubscribeSync("_INBOX.api.stolen")
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Flush(); err != nil {
		t.Fatal(err)
	}
	deny, err := schemas.Encode(&schemas.ApprovalDecision{Header: schemas.NewHeader(schemas.KindApprovalDecision),
		RequestID: "held-1", Decision: schemas.DecisionDeny, By: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	if err := approver.PublishMsg(&nats.Msg{Subject: topo.NS.JudgeApproveSubject(auth.Approver), Reply: "_INBOX.api.stolen", Data: deny}); err != nil {
		t.Fatal(err)
	}
	// Decisions are handled one at a time, in order.
	if _, err := judgeclient.Decide(ctx, approver.Conn, topo.NS, auth.Approver, &schemas.ApprovalDecision{
		RequestID: "nope", Decision: schemas.DecisionDeny, By: "bob"}); !errors.Is(err, judgeclient.ErrNotPending) {
		t.Fatalf("the approver's own decision: %v, want ErrNotPending (answered)", err)
	}
	if m, err := apiInbox.NextMsg(50 * time.Millisecond); err == nil {
		t.Errorf("the judge answered in the api's inbox: %q", m.Data)
	}
	e, err := approvals.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var after schemas.BreakGlassApproval
	if err := schemas.Decode(e.Value(), &after); err != nil || after.State != schemas.ApprovalPending {
		t.Errorf("after a decision with another's inbox the held call is %q (err %v), want pending", after.State, err)
	}
	for _, c := range []*authtest.Conn{api, approver} {
		for _, v := range c.Violations() {
			t.Errorf("%s was refused: %v", c.Identity, v)
		}
	}
}
