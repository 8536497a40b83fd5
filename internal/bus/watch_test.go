package bus_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// fakeWatcher is a started watch.
type fakeWatcher struct {
	updates chan jetstream.KeyValueEntry
	stopped atomic.Bool
}

func (w *fakeWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }
func (w *fakeWatcher) Stop() error                             { w.stopped.Store(true); return nil }

// TestWatchRetriesUnansweredStart: a watch whose creation request is never
// answered (a JetStream cluster drops it while a node dies) is tried
// again after the attempt timeout, not waited on for the caller's whole
// context; the watch that starts keeps its context until it is stopped.
func TestWatchRetriesUnansweredStart(t *testing.T) {
	bus.SetWatchAttemptTimeout(t, 50*time.Millisecond)
	var (
		tries int
		live  context.Context
	)
	fw := &fakeWatcher{updates: make(chan jetstream.KeyValueEntry)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := bus.StartWatch(ctx, func(actx context.Context) (jetstream.KeyWatcher, error) {
		tries++
		if tries < 3 {
			<-actx.Done() // the request is lost: no answer until the context ends
			return nil, actx.Err()
		}
		live = actx
		return fw, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tries != 3 {
		t.Fatalf("%d tries, want 3", tries)
	}
	time.Sleep(150 * time.Millisecond) // past the attempt timeout
	if live.Err() != nil {
		t.Fatalf("the started watch's context ended: %v", context.Cause(live))
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if !fw.stopped.Load() || live.Err() == nil {
		t.Fatalf("Stop: watcher stopped %v, context %v; want both ended", fw.stopped.Load(), live.Err())
	}
}

// TestWatchStartErrors: a failure that is not transient is returned at
// once; a transient one is retried; the caller's context ends the tries.
func TestWatchStartErrors(t *testing.T) {
	bus.SetWatchAttemptTimeout(t, 50*time.Millisecond)
	boom := errors.New("boom")
	tries := 0
	_, err := bus.StartWatch(context.Background(), func(context.Context) (jetstream.KeyWatcher, error) {
		tries++
		return nil, boom
	})
	if !errors.Is(err, boom) || tries != 1 {
		t.Fatalf("err %v after %d tries, want boom after 1", err, tries)
	}

	tries = 0
	fw := &fakeWatcher{}
	w, err := bus.StartWatch(context.Background(), func(context.Context) (jetstream.KeyWatcher, error) {
		tries++
		if tries == 1 {
			return nil, jetstream.ErrNoStreamResponse
		}
		return fw, nil
	})
	if err != nil || tries != 2 {
		t.Fatalf("err %v after %d tries, want a watch after 2", err, tries)
	}
	_ = w.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = bus.StartWatch(ctx, func(actx context.Context) (jetstream.KeyWatcher, error) {
		<-actx.Done()
		return nil, actx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %v, want the caller's deadline", err, time.Since(start))
	}
}

// TestTopologyBucketListings: the topology's buckets (watchKV) list keys,
// history and updates as jetstream's own do.
func TestTopologyBucketListings(t *testing.T) {
	_, js := testkit.Connect(t, testkit.StartNATS(t).URL)
	ctx := opCtx(t)
	topo, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	kv := topo.Jobs
	if _, err := kv.Keys(ctx); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatalf("Keys of an empty bucket: %v, want ErrNoKeysFound", err)
	}
	w, err := kv.Watch(ctx, "a.>")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	if e := <-w.Updates(); e != nil {
		t.Fatalf("initial values of an empty watch: %v", e)
	}
	for _, k := range []string{"a.1", "a.2", "b.1", "a.1"} {
		if _, err := kv.PutString(ctx, k, "v-"+k); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "b.1"); err != nil {
		t.Fatal(err)
	}
	// Until a.2 and then a.1's second value: an ordered consumer that
	// resets before it delivered anything (a missed heartbeat on a loaded
	// machine) starts again from the last value per key, so the first
	// a.1 may be folded into the second.
	var seen []string
	for i := slices.Index(seen, "a.2"); i < 0 || !slices.Contains(seen[i+1:], "a.1"); i = slices.Index(seen, "a.2") {
		select {
		case e := <-w.Updates():
			seen = append(seen, e.Key())
		case <-ctx.Done():
			t.Fatalf("watch saw %v", seen)
		}
	}
	if !slices.Equal(seen, []string{"a.1", "a.2", "a.1"}) && !slices.Equal(seen, []string{"a.2", "a.1"}) {
		t.Fatalf("watch saw %v, want a.1, a.2, a.1 (or a.2, a.1)", seen)
	}
	keys, err := kv.Keys(ctx)
	if err != nil || !slices.Equal(keys, []string{"a.1", "a.2"}) {
		t.Fatalf("Keys: %v, %v", keys, err)
	}
	for _, list := range []func() (jetstream.KeyLister, error){
		func() (jetstream.KeyLister, error) { return kv.ListKeys(ctx) },
		func() (jetstream.KeyLister, error) { return kv.ListKeysFiltered(ctx, "a.2", "b.*") },
	} {
		l, err := list()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for k := range l.Keys() {
			got = append(got, k)
		}
		slices.Sort(got)
		if len(got) == 0 || got[len(got)-1] != "a.2" {
			t.Fatalf("listed %v", got)
		}
	}
	h, err := kv.History(ctx, "a.1")
	if err != nil || len(h) != 1 || string(h[0].Value()) != "v-a.1" {
		t.Fatalf("History: %d entries, %v", len(h), err)
	}
	if _, err := kv.History(ctx, "c.1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("History of no key: %v, want ErrKeyNotFound", err)
	}
}
