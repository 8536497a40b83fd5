package topology_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// notices is a log that signals once a line holding want is written.
type notices struct {
	want []byte
	seen chan struct{}
	once sync.Once
}

func newNotices(want string) *notices {
	return &notices{want: []byte(want), seen: make(chan struct{})}
}

func (n *notices) Write(p []byte) (int, error) {
	if bytes.Contains(p, n.want) {
		n.once.Do(func() { close(n.seen) })
	}
	return len(p), nil
}

func (n *notices) logger() *slog.Logger { return slog.New(slog.NewTextHandler(n, nil)) }

// awaitRole starts what a voter does at start, Ensure with Await, and
// returns its outcome once it has one.
func awaitRole(ctx context.Context, js jetstream.JetStream, cfg topology.Config) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := topology.Ensure(ctx, js, cfg)
		done <- err
	}()
	return done
}

func streamNames(t *testing.T, ctx context.Context, js jetstream.JetStream) []string {
	t.Helper()
	var out []string
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		out = append(out, n)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAwaitTopology (issue 9, finding 11): a voter started before any
// coordinator creates nothing: it logs that it waits for the fleet
// topology, and goes on once a coordinator made it, with the
// coordinator's settings.
func TestAwaitTopology(t *testing.T) {
	t.Parallel()
	_, js := testkit.Connect(t, testkit.StartNATS(t).URL)
	ctx := longCtx(t)
	log := newNotices("waiting for the fleet topology")
	voter := awaitRole(ctx, js, topology.Config{Await: true, Logger: log.logger()})
	select {
	case <-log.seen:
	case err := <-voter:
		t.Fatalf("the voter did not wait for the topology: %v", err)
	case <-ctx.Done():
		t.Fatal("the voter never said it waits for the fleet topology")
	}
	if got := streamNames(t, ctx, js); len(got) != 0 {
		t.Fatalf("a waiting voter created streams %v", got)
	}
	coord := topology.Config{Storage: jetstream.MemoryStorage, MaxMsgSize: 2 << 20, SampleAckWait: 45 * time.Second}
	if _, err := topology.Ensure(ctx, js, coord); err != nil {
		t.Fatal(err)
	}
	if err := <-voter; err != nil {
		t.Fatalf("the voter, once the topology exists: %v", err)
	}
	s, err := js.Stream(ctx, bus.DefaultNamespace.SamplesStream())
	if err != nil {
		t.Fatal(err)
	}
	if sc := s.CachedInfo().Config; sc.MaxMsgSize != coord.MaxMsgSize || sc.Storage != jetstream.MemoryStorage {
		t.Errorf("samples stream: max msg size %d, storage %v; want the coordinator's %d, memory", sc.MaxMsgSize, sc.Storage, coord.MaxMsgSize)
	}
	c, err := js.Consumer(ctx, bus.DefaultNamespace.SamplesStream(), bus.ConsumerVoters)
	if err != nil {
		t.Fatal(err)
	}
	if aw := c.CachedInfo().Config.AckWait; aw != coord.SampleAckWait {
		t.Errorf("voters' consumer: ack wait %s, want the coordinator's %s", aw, coord.SampleAckWait)
	}

	// A wait ends with its ctx.
	cctx, cancel := context.WithCancel(ctx)
	waiting := awaitRole(cctx, js, topology.Config{Namespace: "other", Await: true, Logger: slog.New(slog.DiscardHandler)})
	cancel()
	if err := <-waiting; err == nil || cctx.Err() == nil {
		t.Errorf("a cancelled wait returned %v", err)
	}
}

// TestReplicasFromTheCreator (issue 9, finding 11) on a 3-node cluster: a
// voter started first waits; a client that creates the topology before
// the coordinator leaves it with one replica; the coordinator started
// with 3 replicas raises every stream and bucket to 3.
func TestReplicasFromTheCreator(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := testkit.StartNATSCluster(t, 3)
	nc, err := nats.Connect(cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log := newNotices("waiting for the fleet topology")
	voter := awaitRole(ctx, js, topology.Config{Await: true, Logger: log.logger()})
	select {
	case <-log.seen:
	case err := <-voter:
		t.Fatalf("the voter did not wait for the topology: %v", err)
	}
	// An older client creating it first (as submit on a bare server does).
	if _, err := topology.Ensure(ctx, js, topology.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := <-voter; err != nil {
		t.Fatal(err)
	}
	if _, err := topology.Ensure(ctx, js, topology.Config{Replicas: 3, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	ns := bus.DefaultNamespace
	for _, name := range []string{ns.JobsStream(), ns.SamplesStream(), ns.ResultsStream(), ns.JournalStream(), ns.DLQStream(),
		"KV_" + ns.StatusBucket(), "KV_" + ns.ReportsBucket(), "KV_" + ns.JobsBucket(), "KV_" + ns.LeasesBucket(), "KV_" + ns.TasksBucket()} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s has %d replicas, want the coordinator's 3", name, r)
		}
	}
	// Never lowered: a creator asking for fewer leaves them.
	if _, err := topology.Ensure(ctx, js, topology.Config{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if s, err := js.Stream(ctx, ns.SamplesStream()); err != nil || s.CachedInfo().Config.Replicas != 3 {
		t.Errorf("after a creator with 1 replica: %v", err)
	}
}
