package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestWhoami: a key reads what it is, its public prefix and never its
// secret; an admin key says it is one.
func TestWhoami(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	var me schemas.Whoami
	e.json(http.MethodGet, "/v1/whoami", e.key[alpha], nil).decode(t, http.StatusOK, &me)
	if me.Tenant != alpha || me.Admin || me.KeyPrefix == "" || len(me.KeyPrefix) >= len(e.key[alpha]) ||
		e.key[alpha][:len(me.KeyPrefix)] != me.KeyPrefix {
		t.Errorf("alpha's key says %+v", me)
	}
	var adm schemas.Whoami
	e.json(http.MethodGet, "/v1/whoami", e.admin, nil).decode(t, http.StatusOK, &adm)
	if !adm.Admin {
		t.Errorf("the admin key says %+v", adm)
	}
	e.json(http.MethodGet, "/v1/whoami", "mk_nosuchkey_secret", nil).problem(t, http.StatusUnauthorized, api.TypeUnauthorized)
}

// TestReplayDeadLettersThroughAPI: only an admin key replays; a dead
// letter maker dlq replay would refuse (bus.CheckReplay) is refused with
// the same reason and kept, and the others are replayed all the same and
// leave the DLQ.
func TestReplayDeadLettersThroughAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := e.fleet.Topo.NS
	good := &schemas.DeadLetter{
		Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: ns.SamplesStream(), Seq: 1,
		Subject: ns.SampleSubject(alpha, "j1"), Consumer: bus.ConsumerVoters, Reason: "unreadable request",
		Deliveries: 1, Data: []byte(`{"broken":`), At: time.Now().UTC(),
	}
	// A forged one: it names another stream than the samples stream.
	forged := *good
	forged.Stream, forged.Seq = "KV_maker_apikeys", 2
	for _, dl := range []*schemas.DeadLetter{good, &forged} {
		if err := bus.PublishDeadLetter(ctx, e.fleet.Topo.JS, ns, dl); err != nil {
			t.Fatal(err)
		}
	}
	list := func() []schemas.StoredDeadLetter {
		t.Helper()
		var l schemas.DeadLetterList
		e.json(http.MethodGet, "/v1/dlq?tenant=*", e.admin, nil).decode(t, http.StatusOK, &l)
		return l.DeadLetters
	}
	dls := list()
	if len(dls) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dls))
	}
	seqs := map[uint64]uint64{} // stream seq -> dlq seq
	for _, d := range dls {
		seqs[d.Seq] = d.DLQSeq
	}
	// What the CLI's check says of the forged one.
	dlq, err := e.fleet.Topo.JS.Stream(ctx, ns.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := dlq.GetMsg(ctx, seqs[2])
	if err != nil {
		t.Fatal(err)
	}
	var stored schemas.DeadLetter
	if err := schemas.Decode(raw.Data, &stored); err != nil {
		t.Fatal(err)
	}
	want := ns.CheckReplay(raw.Subject, &stored)
	refusal := (*bus.ReplayRefusal)(nil)
	if !errors.As(want, &refusal) {
		t.Fatalf("the CLI's check takes the forged dead letter: %v", want)
	}

	body := schemas.DLQReplayBody{Seqs: []uint64{seqs[2], seqs[1]}}
	e.json(http.MethodPost, "/v1/dlq/replay", e.key[alpha], body).problem(t, http.StatusForbidden, api.TypeForbidden)
	if len(list()) != 2 {
		t.Fatal("a tenant key's replay changed the DLQ")
	}
	for _, bad := range []schemas.DLQReplayBody{{}, {Seqs: []uint64{0}}, {Seqs: []uint64{seqs[1], seqs[1]}}} {
		e.json(http.MethodPost, "/v1/dlq/replay", e.admin, bad).problem(t, http.StatusUnprocessableEntity, api.TypeInvalid)
	}

	var res schemas.DLQReplayResult
	e.json(http.MethodPost, "/v1/dlq/replay", e.admin, body).decode(t, http.StatusOK, &res)
	if len(res.Refused) != 1 || res.Refused[0].Seq != seqs[2] || res.Refused[0].Reason != refusal.Reason {
		t.Errorf("refused %+v, want dead letter %d refused as the CLI refuses it: %q", res.Refused, seqs[2], refusal.Reason)
	}
	if len(res.Replayed) != 1 || res.Replayed[0].DLQSeq != seqs[1] || res.Replayed[0].Subject != good.Subject || len(res.Failed) != 0 {
		t.Errorf("replayed %+v, failed %+v; want dead letter %d replayed", res.Replayed, res.Failed, seqs[1])
	}
	if left := list(); len(left) != 1 || left[0].DLQSeq != seqs[2] {
		t.Errorf("the DLQ holds %+v, want only the refused one", left)
	}
	// Replaying what is gone fails, and says so.
	e.json(http.MethodPost, "/v1/dlq/replay", e.admin, schemas.DLQReplayBody{Seqs: []uint64{seqs[1]}}).decode(t, http.StatusOK, &res)
	if len(res.Failed) != 1 || len(res.Replayed) != 0 {
		t.Errorf("a second replay of %d: %+v", seqs[1], res)
	}
}
