package inputs_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/inputs"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	_, js := testkit.Connect(t, testkit.StartNATS(t).URL)
	return js
}

func ensure(ctx context.Context, t *testing.T, js jetstream.JetStream, ns bus.Namespace) {
	t.Helper()
	if _, err := topology.Ensure(ctx, js, topology.Config{Namespace: ns, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
}

// TestStore: params larger than a message go in and come back whole under
// their content's name; storing them again sends nothing; what was never
// stored, or is stored under another's name, is refused with its own
// error; a fleet without the store says how to make it.
func TestStore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := jetStream(t)
	ns := bus.Namespace("inputs-store")

	if _, err := inputs.New(js, ns, inputs.Config{}).Put(ctx, []byte(`{}`)); !errors.Is(err, inputs.ErrNoStore) {
		t.Fatalf("put before the topology exists: %v, want ErrNoStore", err)
	}
	ensure(ctx, t, js, ns)

	big := []byte(`{"items":["` + strings.Repeat("abcdefgh", 400_000) + `"]}`) // 3.2 MB, over a message
	st := inputs.New(js, ns, inputs.Config{CacheBytes: -1})
	ref, err := st.Put(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	if ref != schemas.InputRef(big) || !schemas.ValidInputRef(ref) {
		t.Fatalf("ref %q, want %q", ref, schemas.InputRef(big))
	}
	obs, err := js.ObjectStore(ctx, ns.InputsBucket())
	if err != nil {
		t.Fatal(err)
	}
	before, err := obs.GetInfo(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := st.Put(ctx, big); err != nil || again != ref {
		t.Fatalf("second put: %q, %v", again, err)
	}
	if after, _ := obs.GetInfo(ctx, ref); after.NUID != before.NUID {
		t.Error("a fresh input was stored again")
	}
	other := inputs.New(js, ns, inputs.Config{CacheBytes: -1}) // nothing cached: read from the server
	got, err := other.Get(ctx, ref)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}

	if _, err := other.Get(ctx, schemas.InputRef([]byte("never"))); !errors.Is(err, inputs.ErrNotFound) {
		t.Errorf("never stored: %v", err)
	}
	for _, bad := range []string{"", "sha256:", "sha256:XYZ", "md5:" + strings.Repeat("0", 64), "sha256:" + strings.Repeat("A", 64)} {
		if _, err := other.Get(ctx, bad); !errors.Is(err, inputs.ErrBadRef) {
			t.Errorf("ref %q: %v, want ErrBadRef", bad, err)
		}
	}
	// Bytes put under another's name by hand: the name does not match.
	lie := schemas.InputRef([]byte(`{"a":1}`))
	if _, err := obs.PutBytes(ctx, lie, []byte(`{"a":2}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Get(ctx, lie); !errors.Is(err, inputs.ErrCorrupt) {
		t.Errorf("mismatched bytes: %v, want ErrCorrupt", err)
	}

	tooBig := make([]byte, schemas.MaxParamsBytes+1)
	if _, err := st.Put(ctx, tooBig); !errors.Is(err, inputs.ErrTooBig) {
		t.Errorf("over the limit: %v, want ErrTooBig", err)
	}
}

// TestStoreRefresh: params stored longer ago than Refresh are stored
// again, so the store's TTL restarts for a job that still needs them.
func TestStoreRefresh(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := jetStream(t)
	ns := bus.Namespace("inputs-refresh")
	ensure(ctx, t, js, ns)
	st := inputs.New(js, ns, inputs.Config{Refresh: time.Nanosecond})
	data := []byte(`{"n":1}`)
	ref, err := st.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	obs, _ := js.ObjectStore(ctx, ns.InputsBucket())
	first, _ := obs.GetInfo(ctx, ref)
	if _, err := st.Put(ctx, data); err != nil {
		t.Fatal(err)
	}
	second, err := obs.GetInfo(ctx, ref)
	if err != nil || second.NUID == first.NUID {
		t.Fatalf("not stored again after Refresh: %v", err)
	}
	if got, err := inputs.New(js, ns, inputs.Config{}).Get(ctx, ref); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after refresh: %s, %v", got, err)
	}
}

// TestStoreUnavailable: a store that does not answer is ErrUnavailable,
// which callers try again (a job is not failed for it); what the store
// says (not found) is not.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, js := testkit.Connect(t, testkit.StartNATS(t).URL)
	ns := bus.Namespace("inputs-away")
	ensure(ctx, t, js, ns)
	st := inputs.New(js, ns, inputs.Config{CacheBytes: -1})
	missing := schemas.InputRef([]byte("never"))
	if _, err := st.Get(ctx, missing); !errors.Is(err, inputs.ErrNotFound) || errors.Is(err, inputs.ErrUnavailable) {
		t.Fatalf("not found: %v", err)
	}
	nc.Close()
	if _, err := st.Get(ctx, missing); !errors.Is(err, inputs.ErrUnavailable) {
		t.Errorf("a closed connection: %v, want ErrUnavailable", err)
	}
}
