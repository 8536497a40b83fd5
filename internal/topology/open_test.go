package topology_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/topology"
)

// TestOpen: Open and OpenJudge bind what Ensure and EnsureJudge created
// and create nothing themselves: on a server without the topology (or
// with part of it) they say what is missing and leave the server as it
// was.
func TestOpen(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	ctx := opCtx(t)

	_, err := topology.Open(ctx, js, topology.Config{})
	if !errors.Is(err, topology.ErrNoFleet) || err.Error() != "no makerfleet topology on this server (namespace maker): start a coordinator, or run maker topology create" {
		t.Errorf("Open on an empty server: %v, want ErrNoFleet saying how to get one", err)
	}
	if _, err := topology.OpenJudge(ctx, js, topology.JudgeConfig{}); !errors.Is(err, topology.ErrNoJudge) || !strings.Contains(err.Error(), "maker judge") {
		t.Errorf("OpenJudge on an empty server: %v, want ErrNoJudge", err)
	}
	if got := names(t, js); len(got) != 0 {
		t.Fatalf("Open and OpenJudge created %v", got)
	}

	cfg := topology.Config{Storage: jetstream.MemoryStorage}
	made, err := topology.Ensure(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	created := names(t, js)
	topo, err := topology.Open(ctx, js, topology.Config{})
	if err != nil {
		t.Fatalf("Open after Ensure: %v", err)
	}
	if _, err := made.Jobs.Put(ctx, "default.j1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for name, kv := range map[string]jetstream.KeyValue{"jobs": topo.Jobs, "status": topo.Status, "reports": topo.Reports, "leases": topo.Leases} {
		if kv == nil {
			t.Fatalf("Open left the %s bucket unbound", name)
		}
	}
	if e, err := topo.Jobs.Get(ctx, "default.j1"); err != nil || string(e.Value()) != "x" {
		t.Errorf("the opened jobs bucket reads %v, %v; want what was put through Ensure's", e, err)
	}
	if _, err := topology.Open(ctx, js, topology.Config{Namespace: "other"}); !errors.Is(err, topology.ErrNoFleet) || !strings.Contains(err.Error(), "(namespace other)") {
		t.Errorf("Open of another namespace: %v, want ErrNoFleet naming it", err)
	}

	// Part of the topology: Open names what is missing and adds nothing.
	if err := js.DeleteStream(ctx, made.NS.DLQStream()); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, made.NS.LeasesBucket()); err != nil {
		t.Fatal(err)
	}
	_, err = topology.Open(ctx, js, topology.Config{})
	if !errors.Is(err, topology.ErrNoFleet) || !strings.Contains(err.Error(), "bucket maker_leases, stream MAKER_DLQ missing") {
		t.Errorf("Open of part of the topology: %v, want ErrNoFleet naming the missing stream and bucket", err)
	}
	if got := len(names(t, js)); got != len(created)-2 {
		t.Errorf("Open of part of the topology left %d streams, want the %d that were there", got, len(created)-2)
	}

	if _, err := topology.EnsureJudge(ctx, js, topology.JudgeConfig{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	jt, err := topology.OpenJudge(ctx, js, topology.JudgeConfig{})
	if err != nil || jt.Answers == nil || jt.Sessions == nil || jt.Approvals == nil {
		t.Errorf("OpenJudge after EnsureJudge: %+v, %v", jt, err)
	}
}
