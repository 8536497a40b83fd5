package bus_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// TestPurgeOrphanResults (issue 9, finding 9): results no consumer will
// read (of a generation whose owner gave the job up, of a finished job)
// are removed; those of a generation whose consumer exists stay for its
// owner, and so does a result stored after the consumers were looked at.
func TestPurgeOrphanResults(t *testing.T) {
	t.Parallel()
	js, topo := dlqFleet(t)
	ns := topo.NS
	ctx := dlqCtx(t)
	// Job acme/j1 is owned under generation 2: its consumer reads
	// generation 2's subject only.
	if _, err := js.CreateOrUpdateConsumer(ctx, ns.ResultsStream(), jetstream.ConsumerConfig{
		Durable: bus.ResultConsumer("acme", "j1", 2), FilterSubject: ns.ResultSubject("acme", "j1", 2),
		AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, n int) {
		for range n {
			if _, err := js.Publish(ctx, subject, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	old := ns.ResultSubject("acme", "j1", 1)      // a stopped owner's generation
	current := ns.ResultSubject("acme", "j1", 2)  // read by its owner
	finished := ns.ResultSubject("acme", "j0", 5) // a job cleaned up
	publish(old, 3)
	publish(current, 2)
	publish(finished, 4)

	got, err := bus.PurgeOrphanResults(ctx, js, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[old] != 3 || got[finished] != 4 || len(got) != 2 || got.Total() != 7 {
		t.Errorf("purged %v, want 3 of %s and 4 of %s", got, old, finished)
	}
	s, err := js.Stream(ctx, ns.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 || info.State.Subjects[current] != 2 {
		t.Errorf("results stream holds %d messages %v, want the 2 of %s", info.State.Msgs, info.State.Subjects, current)
	}
	// Nothing left to remove: a second pass changes nothing.
	if got, err := bus.PurgeOrphanResults(ctx, js, ns, nil); err != nil || got.Total() != 0 {
		t.Errorf("second pass purged %v (err %v), want nothing", got, err)
	}
}

// TestPurgeOrphanResultsKeepsUnlisted (review finding 5): on a cluster
// the consumer list leaves out a consumer whose info is slow or offline,
// and nats.go drops the names it reports missing. The sweep removes a
// subject's results only when the server answers "consumer not found" for
// its generation's durable: a live consumer the list left out keeps its
// results, and so does one whose lookup fails or times out. A result
// stored after the sweep looked stays too.
func TestPurgeOrphanResultsKeepsUnlisted(t *testing.T) {
	t.Parallel()
	js, topo := dlqFleet(t)
	ns := topo.NS
	ctx := dlqCtx(t)
	consumer := func(tenant, job string, gen int64) {
		t.Helper()
		if _, err := js.CreateOrUpdateConsumer(ctx, ns.ResultsStream(), jetstream.ConsumerConfig{
			Durable: bus.ResultConsumer(tenant, job, gen), FilterSubject: ns.ResultSubject(tenant, job, gen),
			AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: time.Hour,
		}); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(subject string, n int) {
		t.Helper()
		for range n {
			if _, err := js.Publish(ctx, subject, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	consumer("acme", "j1", 2) // live, left out of the list
	consumer("acme", "j4", 1) // live, listed
	unlisted := ns.ResultSubject("acme", "j1", 2)
	listed := ns.ResultSubject("acme", "j4", 1)
	slow := ns.ResultSubject("acme", "j2", 1)        // its lookup times out
	finished := ns.ResultSubject("acme", "j0", 5)    // no consumer: removed
	nameless := ns.String() + ".v1.result.acme.j5.x" // no generation's subject
	publish(unlisted, 2)
	publish(listed, 1)
	publish(slow, 3)
	publish(finished, 4)
	publish(nameless, 1)

	stub := &stubJS{JetStream: js,
		omit: map[string]bool{bus.ResultConsumer("acme", "j1", 2): true},
		fail: map[string]error{bus.ResultConsumer("acme", "j2", 1): nats.ErrTimeout},
		// A result stored after the sweep looked at the stream: a voter
		// answering just then. It is not the sweep's to remove.
		before: map[string]func(){bus.ResultConsumer("acme", "j0", 5): func() { publish(finished, 1) }},
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	got, err := bus.PurgeOrphanResults(ctx, stub, ns, log)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[finished] != 4 {
		t.Errorf("purged %v, want only the 4 of %s", got, finished)
	}
	if !stub.listedWithout {
		t.Fatal("the stub's consumer list was not used")
	}
	s, err := js.Stream(ctx, ns.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{unlisted: 2, listed: 1, slow: 3, finished: 1, nameless: 1}
	for subject, n := range want {
		if info.State.Subjects[subject] != n {
			t.Errorf("%s holds %d results, want %d (stream: %v)", subject, info.State.Subjects[subject], n, info.State.Subjects)
		}
	}
	if info.State.Msgs != 8 {
		t.Errorf("results stream holds %d messages, want 8", info.State.Msgs)
	}
	for _, line := range []string{"consumer list left it out", "could not be looked up", "names no lease generation"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("log has no %q:\n%s", line, logs.String())
		}
	}
}

// stubJS is a JetStream whose results stream lists its consumers without
// those in omit (as a cluster does when their info is slow or offline),
// fails the lookup of those in fail, and runs before[name] before looking
// name up.
type stubJS struct {
	jetstream.JetStream
	omit   map[string]bool
	fail   map[string]error
	before map[string]func()

	mu            sync.Mutex
	listedWithout bool
}

func (j *stubJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := j.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return stubStream{Stream: s, js: j}, nil
}

type stubStream struct {
	jetstream.Stream
	js *stubJS
}

func (s stubStream) ListConsumers(ctx context.Context) jetstream.ConsumerInfoLister {
	l := &stubLister{ch: make(chan *jetstream.ConsumerInfo, 64)}
	real := s.Stream.ListConsumers(ctx)
	for ci := range real.Info() {
		if s.js.omit[ci.Name] {
			s.js.mu.Lock()
			s.js.listedWithout = true
			s.js.mu.Unlock()
			continue
		}
		l.ch <- ci
	}
	l.err = real.Err()
	close(l.ch)
	return l
}

func (s stubStream) Consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	if f := s.js.before[name]; f != nil {
		f()
	}
	if err := s.js.fail[name]; err != nil {
		return nil, err
	}
	return s.Stream.Consumer(ctx, name)
}

type stubLister struct {
	ch  chan *jetstream.ConsumerInfo
	err error
}

func (l *stubLister) Info() <-chan *jetstream.ConsumerInfo { return l.ch }
func (l *stubLister) Err() error                           { return l.err }
