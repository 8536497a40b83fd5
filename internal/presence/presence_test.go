package presence_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/presence"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

func voterRecord(id string, at time.Time) *schemas.VoterPresence {
	return &schemas.VoterPresence{
		Header: schemas.NewHeader(schemas.KindVoterPresence), ID: id, Models: []string{"sim-1"},
		Concurrency: 4, InFlight: 1, SamplesAnswered: 10, RedFlags: 1, ProviderErrors: 3, RateLimited: 2, SamplesPerS: 1.5,
		Started: at.Add(-time.Minute), At: at,
	}
}

// A publisher's record is read back as it was written, and gone once the
// publisher stops; records that are stale, misplaced, over their caps or
// not records are skipped, and a namespace without the bucket says so.
func TestPublishRead(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := presence.Read(ctx, js, bus.DefaultNamespace, time.Now()); !errors.Is(err, presence.ErrNoBucket) {
		t.Fatalf("Read without a bucket: %v, want ErrNoBucket", err)
	}
	topo, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage, PresenceTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ns := topo.NS
	pub, err := presence.NewPublisher(js, presence.RoleVoter, "v 1", func(now time.Time) schemas.Message { return voterRecord("v 1", now) },
		presence.Config{Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if pub.Key() != "voter.v_1" {
		t.Errorf("key %q, want voter.v_1", pub.Key())
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); pub.Run(pctx) }() // owned: stopped below

	kv, err := js.KeyValue(ctx, ns.PresenceBucket())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	stale := voterRecord("old", now.Add(-time.Minute)) // older than 2 x TTL
	over := voterRecord("wide", now)
	over.Models = make([]string, schemas.MaxPresenceModels+1)
	for i := range over.Models {
		over.Models[i] = "m"
	}
	mine := voterRecord("other", now)
	coord := &schemas.CoordinatorPresence{Header: schemas.NewHeader(schemas.KindCoordinatorPresence), ID: "c1",
		Jobs:    []schemas.PresenceJob{{Tenant: "acme", ID: "j1", State: "running", Step: 3, InFlight: 2}},
		Tenants: []schemas.TenantInFlight{{Tenant: "acme", Jobs: 1, InFlight: 2}}, Started: now, At: now}
	put := func(key string, v any) {
		t.Helper()
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	put("voter.old", stale)
	put("voter.wide", over)
	put("voter.imposter", mine) // another's id
	put("coordinator.other", mine)
	put("judge.x", mine)
	put("coordinator.c1", coord)
	if _, err := kv.Put(ctx, "voter.junk", []byte("not json")); err != nil {
		t.Fatal(err)
	}

	var recs presence.Records
	testkit.Eventually(t, 10*time.Second, func() bool {
		recs, err = presence.Read(ctx, js, ns, time.Now())
		return err == nil && len(recs.Voters) == 1
	}, "the publisher's record never read: %v %+v", err, recs)
	if v := recs.Voters[0]; v.ID != "v 1" || v.Concurrency != 4 || v.Models[0] != "sim-1" {
		t.Errorf("voter %+v", v)
	}
	if len(recs.Coordinators) != 1 || recs.Coordinators[0].ID != "c1" {
		t.Errorf("coordinators %+v", recs.Coordinators)
	}
	if recs.Skipped != 6 || recs.TTL != 10*time.Second {
		t.Errorf("skipped %d, ttl %v; want 6 and 10s", recs.Skipped, recs.TTL)
	}

	view, err := presence.View(ctx, js, ns, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tot := view.Totals
	if tot.Voters != 1 || tot.Concurrency != 4 || tot.ProviderErrors != 3 || tot.RateLimited != 2 || tot.Jobs != 1 || tot.SamplesPerS != 1.5 {
		t.Errorf("totals %+v", tot)
	}
	if len(view.Tenants) != 1 || view.Tenants[0] != (schemas.TenantInFlight{Tenant: "acme", Jobs: 1, InFlight: 2}) {
		t.Errorf("tenants %+v", view.Tenants)
	}
	if len(view.Queues) != 3 || view.Queues[1].Name != "samples" || view.Queues[1].Consumer != bus.ConsumerVoters {
		t.Errorf("queues %+v", view.Queues)
	}

	stop()
	<-done
	if _, err := kv.Get(ctx, pub.Key()); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("record after stop: %v, want deleted", err)
	}
}

// Build sums claims without overflowing.
func TestBuildSaturates(t *testing.T) {
	t.Parallel()
	now := time.Now()
	a, b := voterRecord("a", now), voterRecord("b", now)
	a.SamplesAnswered, b.SamplesAnswered = 1<<62, 1<<62+5
	v := presence.Build(now, presence.Records{Voters: []schemas.VoterPresence{*a, *b}}, nil)
	if v.Totals.SamplesAnswered != 1<<63-1 {
		t.Errorf("samples answered %d, want MaxInt64", v.Totals.SamplesAnswered)
	}
	if v.Queues == nil || v.Tenants == nil || v.Coordinators == nil {
		t.Error("empty lists must be [] in JSON, not null")
	}
}

// TestClip: a name is cut to the bound on a rune boundary, never inside
// a rune.
func TestClip(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"host-1", 128, "host-1"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"}, // é is 2 bytes: kept whole or not at all
		{"日本", 4, "日"},
		{"日本", 2, ""},
	} {
		if got := presence.Clip(c.s, c.n); got != c.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
