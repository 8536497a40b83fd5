package bus_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

type counter struct {
	N int `json:"n"`
}

// buckets returns n handles, each on its own connection, on one fresh
// bucket: writers in different processes.
func buckets(t *testing.T, n int) []jetstream.KeyValue {
	t.Helper()
	url := testkit.StartNATS(t).URL
	var out []jetstream.KeyValue
	for range n {
		_, js := testkit.Connect(t, url)
		kv, err := js.CreateOrUpdateKeyValue(opCtx(t), jetstream.KeyValueConfig{Bucket: "test", History: 1, Storage: jetstream.MemoryStorage})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, kv)
	}
	return out
}

func counters(kvs []jetstream.KeyValue) []*bus.KV[counter] {
	var out []*bus.KV[counter]
	for _, kv := range kvs {
		out = append(out, bus.NewKV(kv, bus.JSONCodec[counter]()))
	}
	return out
}

func increment(cur *counter) (*counter, error) {
	if cur == nil {
		cur = &counter{}
	}
	cur.N++
	return cur, nil
}

// TestKVUpdateConverges: goroutines on two connections each add one to a
// counter that does not exist yet; every increment lands exactly once
// (losers of a compare-and-set read again and retry), so the counter ends
// at their number, in as many writes.
func TestKVUpdateConverges(t *testing.T) {
	t.Parallel()
	kvs := counters(buckets(t, 2))
	const n = 24
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := kvs[i%2].Update(opCtx(t), "c", increment); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, rev, err := kvs[0].Get(opCtx(t), "c")
	if err != nil {
		t.Fatal(err)
	}
	if got.N != n || rev != n {
		t.Errorf("counter %d at revision %d, want %d in %d writes", got.N, rev, n, n)
	}
}

// TestKVUpdateAbort: a mutation that returns ErrAbort writes nothing, on
// an absent key and on a present one, and Update reports no error; any
// other error comes back as it is, with nothing written either.
func TestKVUpdateAbort(t *testing.T) {
	t.Parallel()
	c := counters(buckets(t, 1))[0]
	ctx := opCtx(t)
	abort := func(cur *counter) (*counter, error) { return nil, bus.ErrAbort }
	if v, err := c.Update(ctx, "c", abort); v != nil || err != nil {
		t.Fatalf("aborted Update of an absent key = %v, %v; want nil, nil", v, err)
	}
	if _, _, err := c.Get(ctx, "c"); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("after an aborted Update the key exists: %v", err)
	}
	if _, err := c.Update(ctx, "c", increment); err != nil {
		t.Fatal(err)
	}
	changeThenAbort := func(cur *counter) (*counter, error) { cur.N = 99; return nil, bus.ErrAbort }
	if v, err := c.Update(ctx, "c", changeThenAbort); v != nil || err != nil {
		t.Fatalf("aborted Update = %v, %v; want nil, nil", v, err)
	}
	boom := errors.New("boom")
	if _, err := c.Update(ctx, "c", func(*counter) (*counter, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("failed mutation: Update = %v, want %v", err, boom)
	}
	if got, rev, err := c.Get(ctx, "c"); err != nil || got.N != 1 || rev != 1 {
		t.Errorf("counter %+v at revision %d (%v), want 1 at revision 1: an aborted or failed update wrote", got, rev, err)
	}
}

// TestKVCreateRace: of many writers creating one key at once, exactly one
// wins; the others get ErrConflict and the winner's value stays. A deleted
// key can be created again, by Create and by Update.
func TestKVCreateRace(t *testing.T) {
	t.Parallel()
	kvs := buckets(t, 2)
	cs := counters(kvs)
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, lost := []int{}, 0
	for i := range n {
		wg.Go(func() {
			_, err := cs[i%2].Create(opCtx(t), "k", &counter{N: i})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, i)
			case errors.Is(err, bus.ErrConflict):
				lost++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 || lost != n-1 {
		t.Fatalf("%d creates won (%v), %d lost; want 1 and %d", len(won), won, lost, n-1)
	}
	if got, _, err := cs[0].Get(opCtx(t), "k"); err != nil || got.N != won[0] {
		t.Errorf("value %+v (%v), want the winner's %d", got, err, won[0])
	}

	ctx := opCtx(t)
	if err := kvs[0].Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cs[0].Get(ctx, "k"); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("Get of a deleted key: %v, want ErrNotFound", err)
	}
	if v, err := cs[1].Update(ctx, "k", increment); err != nil || v.N != 1 {
		t.Fatalf("Update of a deleted key = %+v, %v; want it created at 1", v, err)
	}
	if _, err := cs[0].Create(ctx, "k", &counter{}); !errors.Is(err, bus.ErrConflict) {
		t.Errorf("Create of a present key: %v, want ErrConflict", err)
	}
}

// TestKVPutAtAndCodecs: a write at a stale revision is ErrConflict and
// leaves the value; a schemas message is validated before it is written
// and decoded strictly; an unreadable value is ErrBadValue with its
// revision, so it can be overwritten.
func TestKVPutAtAndCodecs(t *testing.T) {
	t.Parallel()
	raw := buckets(t, 1)[0]
	ctx := opCtx(t)
	leases := bus.NewKV(raw, bus.MessageCodec[schemas.Lease]())
	l := schemas.Lease{Header: schemas.NewHeader(schemas.KindLease), Tenant: "acme", JobID: "j1", Owner: "a", Token: 1,
		ExpiresAt: time.Now().UTC().Truncate(time.Millisecond)}
	rev, err := leases.Create(ctx, "acme.j1", &l)
	if err != nil {
		t.Fatal(err)
	}
	next := l
	next.Token = 2
	rev2, err := leases.PutAt(ctx, "acme.j1", &next, rev)
	if err != nil || rev2 <= rev {
		t.Fatalf("PutAt at the current revision = %d, %v", rev2, err)
	}
	stale := l
	stale.Token = 3
	if _, err := leases.PutAt(ctx, "acme.j1", &stale, rev); !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("PutAt at a stale revision: %v, want ErrConflict", err)
	}
	if got, r, err := leases.Get(ctx, "acme.j1"); err != nil || got.Token != 2 || r != rev2 || !got.ExpiresAt.Equal(l.ExpiresAt) {
		t.Fatalf("Get = %+v at %d (%v), want token 2 at %d", got, r, err, rev2)
	}

	invalid := l
	invalid.Owner = ""
	if _, err := leases.Create(ctx, "acme.j2", &invalid); !errors.Is(err, schemas.ErrInvalid) {
		t.Errorf("Create of an invalid lease: %v, want schemas.ErrInvalid", err)
	}
	for _, bad := range []string{`{"version":1,"kind":"lease","surprise":1}`, `not json`} {
		r, err := raw.Put(ctx, "acme.j1", []byte(bad))
		if err != nil {
			t.Fatal(err)
		}
		if v, got, err := leases.Get(ctx, "acme.j1"); !errors.Is(err, bus.ErrBadValue) || got != r || v != nil {
			t.Errorf("Get of %s = %v at %d (%v), want ErrBadValue at %d", bad, v, got, err, r)
		}
		if _, err := leases.Update(ctx, "acme.j1", func(cur *schemas.Lease) (*schemas.Lease, error) {
			return nil, fmt.Errorf("mutate called on an unreadable value %+v", cur)
		}); !errors.Is(err, bus.ErrBadValue) {
			t.Errorf("Update over %s: %v, want ErrBadValue", bad, err)
		}
	}
}
