package auth_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/inputs"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestAuthInputs: on a real secured server, the submitters (the api, the
// coordinators' batch runner, the admin) store params in the inputs
// store; voters read them, and a voter whose credentials leaked can
// neither store params nor overwrite stored ones with others under their
// name (and a reader refuses bytes that do not match their name anyway).
func TestAuthInputs(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := bus.DefaultNamespace
	admin := srv.Connect(t, auth.Admin)
	adminJS, err := jetstream.New(admin.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topology.Ensure(ctx, adminJS, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	store := func(c *authtest.Conn) *inputs.Store {
		js, err := jetstream.New(c.Conn)
		if err != nil {
			t.Fatal(err)
		}
		return inputs.New(js, ns, inputs.Config{CacheBytes: -1})
	}
	params := []byte(`{"records":["` + strings.Repeat("x", 300_000) + `"]}`)
	var ref string
	for _, id := range []string{auth.API, auth.Coordinator} {
		got, err := store(srv.Connect(t, id)).Put(ctx, params)
		if err != nil {
			t.Fatalf("%s stores params: %v", id, err)
		}
		ref = got
	}
	if ref != schemas.InputRef(params) {
		t.Fatalf("ref %s, want the bytes' hash", ref)
	}
	voterConn := srv.Connect(t, auth.Voter)
	vs := store(voterConn)
	got, err := vs.Get(ctx, ref)
	if err != nil || !bytes.Equal(got, params) {
		t.Fatalf("voter reads params: %d bytes, %v", len(got), err)
	}

	// The leaked voter: storing anything is refused, and so is putting
	// other bytes under the stored params' name.
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	if _, err := vs.Put(pctx, []byte(`{"other":1}`)); err == nil {
		t.Error("a voter stored params")
	}
	vjs, _ := jetstream.New(voterConn.Conn)
	if obs, err := vjs.ObjectStore(pctx, ns.InputsBucket()); err == nil {
		if _, err := obs.PutBytes(pctx, ref, []byte(`{"forged":true}`)); err == nil {
			t.Error("a voter overwrote stored params")
		}
	}
	if got, err := store(srv.Connect(t, auth.API)).Get(ctx, ref); err != nil || !bytes.Equal(got, params) {
		t.Fatalf("after the voter's attempts the params read back as %d bytes, %v", len(got), err)
	}

	// Bytes stored by hand under another's name are refused by readers.
	obs, err := adminJS.ObjectStore(ctx, ns.InputsBucket())
	if err != nil {
		t.Fatal(err)
	}
	fake := schemas.InputRef([]byte(`{"a":1}`))
	if _, err := obs.PutBytes(ctx, fake, []byte(`{"a":2}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := store(voterConn).Get(ctx, fake); !errors.Is(err, inputs.ErrCorrupt) {
		t.Errorf("reading mismatched bytes: %v, want ErrCorrupt", err)
	}
	if _, err := vs.Get(ctx, schemas.InputRef([]byte("never stored"))); !errors.Is(err, inputs.ErrNotFound) {
		t.Errorf("reading what was never stored: %v, want ErrNotFound", err)
	}
}
