package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
)

// TestReplayDeadLettersSecured: on a secured fleet the api identity may
// not issue sample requests, so an admin key's replay is the
// coordinators': a real letter is replayed, a forged one refused as maker
// dlq replay refuses it, and the coordinator identity is refused nothing
// by the server.
func TestReplayDeadLettersSecured(t *testing.T) {
	t.Parallel()
	s := newSecuredEnv(t, api.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adminKey, _, err := apikey.New(s.topo).Create(ctx, apikey.CreateOptions{Tenant: ops, Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	coordConn := s.srv.Connect(t, auth.Coordinator)
	st, err := store.New(testkit.StartRedis(t).Client(t), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	co, err := coordinator.New(coordConn.Conn, st, coordinator.Config{ID: "coordinator-1", Tasks: builtin.Registry(),
		Bus: topology.Config{Storage: jetstream.MemoryStorage}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- co.Run(cctx) }() // owned: stopped and awaited at cleanup
	t.Cleanup(func() {
		ccancel()
		if err := <-done; err != nil && cctx.Err() == nil {
			t.Errorf("coordinator: %v", err)
		}
		for _, v := range coordConn.Violations() {
			t.Errorf("the coordinator identity was refused: %v", v)
		}
	})

	ns := s.topo.NS
	good := &schemas.DeadLetter{Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: ns.SamplesStream(), Seq: 1,
		Subject: ns.SampleSubject(alpha, "jgone"), Consumer: bus.ConsumerVoters, Reason: "unreadable request",
		Deliveries: 1, Data: []byte(`{"broken":`), At: time.Now().UTC()}
	forged := *good
	forged.Stream, forged.Seq = "KV_maker_apikeys", 2
	for _, dl := range []*schemas.DeadLetter{good, &forged} {
		if err := bus.PublishDeadLetter(ctx, s.admin, ns, dl); err != nil {
			t.Fatal(err)
		}
	}
	dls, err := bus.ListDeadLetters(ctx, s.admin, ns, "", "", 10)
	if err != nil || len(dls) != 2 {
		t.Fatalf("dead letters %+v, %v", dls, err)
	}
	seq := map[uint64]uint64{}
	for _, d := range dls {
		seq[d.Seq] = d.DLQSeq
	}
	// The coordinator answers once its control service runs: wait for it
	// (until then the request has no responder, and the server, whose
	// identity may not replay, answers 503).
	probe := s.srv.Connect(t, auth.Admin).Conn
	testkit.Eventually(t, 30*time.Second, func() bool {
		_, err := probe.Request(ns.DLQReplaySubject(), []byte(`{"seqs":[999999]}`), 5*time.Second)
		return err == nil
	}, "no coordinator answers dead-letter replays")
	var res schemas.DLQReplayResult
	body := schemas.DLQReplayBody{Seqs: []uint64{seq[2], seq[1]}}
	s.json(http.MethodPost, "/v1/dlq/replay", adminKey, body).decode(t, http.StatusOK, &res)
	if len(res.Failed) != 0 {
		t.Errorf("failed %+v", res.Failed)
	}
	if len(res.Replayed) != 1 || res.Replayed[0].DLQSeq != seq[1] {
		t.Errorf("replayed %+v, want dead letter %d", res.Replayed, seq[1])
	}
	if len(res.Refused) != 1 || res.Refused[0].Seq != seq[2] {
		t.Errorf("refused %+v, want the forged dead letter %d", res.Refused, seq[2])
	}
	left, err := bus.ListDeadLetters(ctx, s.admin, ns, "", "", 10)
	if err != nil || len(left) != 1 || left[0].DLQSeq != seq[2] {
		t.Errorf("the DLQ holds %+v (%v), want the forged one only", left, err)
	}
	// The replayed request is in the samples stream, on its subject.
	samples, err := s.admin.Stream(ctx, ns.SamplesStream())
	if err != nil {
		t.Fatal(err)
	}
	if m, err := samples.GetLastMsgForSubject(ctx, good.Subject); err != nil || string(m.Data) != string(good.Data) {
		t.Errorf("the replayed sample request: %v", err)
	}
	s.json(http.MethodPost, "/v1/dlq/replay", s.key[alpha], body).problem(t, http.StatusForbidden, api.TypeForbidden)
}
