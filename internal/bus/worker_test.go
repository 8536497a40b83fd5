package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// bench is a work-queue stream "W" on a fresh server, with one durable
// pull consumer, for workers to share.
type bench struct {
	t      *testing.T
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string
	ccfg   jetstream.ConsumerConfig
	// recreated counts the calls of recreate.
	recreated atomic.Int64
}

func newBench(t *testing.T, ackWait time.Duration) *bench {
	t.Helper()
	nc, js := testkit.Connect(t, testkit.StartNATS(t).URL)
	b := &bench{t: t, nc: nc, js: js, stream: "W", ccfg: jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: 20, FilterSubject: "w.>",
	}}
	if _, err := js.CreateStream(opCtx(t), jetstream.StreamConfig{
		Name: b.stream, Subjects: []string{"w.>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.recreate(opCtx(t)); err != nil {
		t.Fatal(err)
	}
	b.recreated.Store(0)
	return b
}

// recreate is the workers' Recreate: it makes the consumer again.
func (b *bench) recreate(ctx context.Context) (jetstream.Consumer, error) {
	b.recreated.Add(1)
	return b.js.CreateOrUpdateConsumer(ctx, b.stream, b.ccfg)
}

// worker starts a worker on the consumer with h; it is stopped at cleanup.
func (b *bench) worker(h bus.Handler, cfg bus.WorkerConfig) *bus.Worker {
	b.t.Helper()
	w := b.newWorker(h, cfg)
	if err := w.Start(context.Background()); err != nil {
		b.t.Fatal(err)
	}
	return w
}

func (b *bench) newWorker(h bus.Handler, cfg bus.WorkerConfig) *bus.Worker {
	b.t.Helper()
	cons, err := b.js.Consumer(opCtx(b.t), b.stream, b.ccfg.Durable)
	if err != nil {
		b.t.Fatal(err)
	}
	if cfg.Recreate == nil {
		cfg.Recreate = b.recreate
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w, err := bus.NewWorker(b.js, cons, h, cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(w.Stop)
	return w
}

func (b *bench) publish(data ...string) {
	b.t.Helper()
	for _, d := range data {
		if _, err := b.js.Publish(opCtx(b.t), "w.x", []byte(d)); err != nil {
			b.t.Fatal(err)
		}
	}
}

func (b *bench) info() *jetstream.ConsumerInfo {
	b.t.Helper()
	cons, err := b.js.Consumer(opCtx(b.t), b.stream, b.ccfg.Durable)
	if err != nil {
		b.t.Fatal(err)
	}
	info, err := cons.Info(opCtx(b.t))
	if err != nil {
		b.t.Fatal(err)
	}
	return info
}

// settledAll reports whether the consumer holds no message any more.
func (b *bench) settledAll() bool {
	info := b.info()
	return info.NumAckPending == 0 && info.NumPending == 0
}

// call is one handler call, as the handler saw it.
type call struct {
	data      string
	delivered uint64
	start     time.Time
	end       time.Time
	ctxErr    error
}

// calls records handler calls.
type calls struct {
	mu  sync.Mutex
	all []call
}

func (c *calls) add(cl call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, cl)
}

func (c *calls) get() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.all)
}

// recording wraps h: every call is recorded once h returns.
func (c *calls) recording(h func(ctx context.Context, msg jetstream.Msg, delivered uint64) error) bus.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		cl := call{data: string(msg.Data()), start: time.Now()}
		if md, err := msg.Metadata(); err == nil {
			cl.delivered = md.NumDelivered
		}
		defer func() { // also when h panics
			cl.end, cl.ctxErr = time.Now(), ctx.Err()
			c.add(cl)
		}()
		return h(ctx, msg, cl.delivered)
	}
}

// TestWorkerSlots: with 12 messages queued and handlers that block, the
// worker never runs more than Concurrency handlers and never holds more
// messages than that (it fetches only into free slots: the rest stay with
// the server for other workers); once released, every message is handled
// once and acked.
func TestWorkerSlots(t *testing.T) {
	t.Parallel()
	const concurrency, queued = 3, 12
	b := newBench(t, 30*time.Second)
	b.publish(strings.Split("a b c d e f g h i j k l", " ")...)
	var inflight, maxInflight atomic.Int64
	release := make(chan struct{})
	var rec calls
	b.worker(rec.recording(func(ctx context.Context, _ jetstream.Msg, _ uint64) error {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := maxInflight.Load(); n > m && !maxInflight.CompareAndSwap(m, n); m = maxInflight.Load() {
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), bus.WorkerConfig{Concurrency: concurrency})

	testkit.Eventually(t, 10*time.Second, func() bool { return inflight.Load() == concurrency }, "%d handlers running, want %d", inflight.Load(), concurrency)
	// Watched a while in the state where a prefetching worker would fill
	// its buffer.
	for range 20 {
		if info := b.info(); info.NumAckPending > concurrency {
			t.Fatalf("the worker holds %d messages with %d slots", info.NumAckPending, concurrency)
		}
	}
	close(release)
	testkit.Eventually(t, 10*time.Second, func() bool { return len(rec.get()) == queued }, "%d of %d handled", len(rec.get()), queued)
	testkit.Eventually(t, 10*time.Second, b.settledAll, "messages left unsettled: %+v", b.info())
	if m := maxInflight.Load(); m != concurrency {
		t.Errorf("up to %d handlers at once, want %d", m, concurrency)
	}
	seen := map[string]bool{}
	for _, c := range rec.get() {
		if seen[c.data] || c.delivered != 1 {
			t.Errorf("message %q handled again (delivery %d)", c.data, c.delivered)
		}
		seen[c.data] = true
	}
	if info := b.info(); info.NumRedelivered != 0 {
		t.Errorf("%d messages redelivered", info.NumRedelivered)
	}
}

// TestWorkerKeepAlive: a handler that takes 2.5 times the consumer's 1s
// AckWait keeps its message: the worker reports it in progress, so it is
// not delivered again (a second slot stands ready to take it if it were).
func TestWorkerKeepAlive(t *testing.T) {
	t.Parallel()
	b := newBench(t, time.Second)
	b.publish("slow")
	var starts atomic.Int64
	var rec calls
	b.worker(rec.recording(func(ctx context.Context, _ jetstream.Msg, _ uint64) error {
		starts.Add(1)
		select {
		case <-time.After(2500 * time.Millisecond): // the work
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), bus.WorkerConfig{Concurrency: 2})
	testkit.Eventually(t, 10*time.Second, func() bool { return len(rec.get()) >= 1 }, "the message was never handled")
	// Without the keep-alive the message would have come again after 1s,
	// while the first call still ran.
	if n := starts.Load(); n != 1 {
		t.Errorf("the message was handled %d times: the keep-alive did not hold it", n)
	}
	testkit.Eventually(t, 10*time.Second, b.settledAll, "message left unsettled: %+v", b.info())
	if got := rec.get(); got[0].delivered != 1 {
		t.Errorf("calls %+v: want the message handled on its first delivery", got)
	}
}

// TestKeepAlive: the keep-alive reports progress every interval, and not
// once more after it is stopped.
func TestKeepAlive(t *testing.T) {
	t.Parallel()
	m := &progressMsg{}
	stop := bus.KeepAlive(m, 10*time.Millisecond)
	testkit.Eventually(t, 10*time.Second, func() bool { return m.n.Load() >= 3 }, "%d InProgress calls, want >= 3 at a 10ms interval", m.n.Load())
	stop()
	after := m.n.Load()
	time.Sleep(50 * time.Millisecond) // five intervals: any stray tick would show
	if got := m.n.Load(); got != after {
		t.Fatalf("%d InProgress calls after stop", got-after)
	}
	if stop := bus.KeepAlive(m, 0); stop == nil {
		t.Fatal("a zero interval must still return a stop func")
	}
}

// progressMsg counts InProgress calls; every other method is unused here.
type progressMsg struct {
	jetstream.Msg
	n atomic.Int64
}

func (m *progressMsg) InProgress() error { m.n.Add(1); return nil }

// TestWorkerSoftStop: Stop lets a handler in flight finish (its ctx is not
// cancelled, Stop waits for it and its message is acked); past SoftStop it
// cancels the handler, and the message is handed back at once (Nak, even
// when the handler asked for a long delay), so another worker takes it
// long before its ack wait. Ending Start's ctx is such a hard stop too.
func TestWorkerSoftStop(t *testing.T) {
	t.Parallel()
	t.Run("in flight finishes", func(t *testing.T) {
		t.Parallel()
		b := newBench(t, 30*time.Second)
		b.publish("m")
		started, release := make(chan struct{}), make(chan struct{})
		var stopReturned atomic.Bool
		var sawStopReturned atomic.Bool
		var rec calls
		w := b.worker(rec.recording(func(ctx context.Context, _ jetstream.Msg, _ uint64) error {
			close(started)
			<-release
			sawStopReturned.Store(stopReturned.Load())
			return nil
		}), bus.WorkerConfig{Concurrency: 2, FetchWait: 200 * time.Millisecond})
		<-started
		testkit.Eventually(t, 10*time.Second, func() bool { return b.info().NumWaiting >= 1 }, "the free slot never fetched")
		stopped := make(chan struct{})
		go func() { w.Stop(); stopReturned.Store(true); close(stopped) }()
		// The free slot's last fetch runs out: the loop has stopped, the
		// handler still runs.
		testkit.Eventually(t, 10*time.Second, func() bool { return b.info().NumWaiting == 0 }, "the worker kept fetching after Stop")
		close(release)
		<-stopped
		got := rec.get()
		if sawStopReturned.Load() || len(got) != 1 || got[0].ctxErr != nil {
			t.Errorf("Stop returned before the handler ended (%v), or cancelled it: %+v", sawStopReturned.Load(), got)
		}
		// The handler's ack is sent before Stop returns; the server takes
		// it a moment later.
		testkit.Eventually(t, 10*time.Second, b.settledAll, "message not acked after Stop")
	})
	hardStop := func(t *testing.T, stop func(w *bus.Worker, cancelStart context.CancelFunc)) {
		b := newBench(t, 30*time.Second)
		b.publish("m")
		var rec calls
		started := make(chan struct{})
		w := b.newWorker(rec.recording(func(ctx context.Context, _ jetstream.Msg, _ uint64) error {
			close(started)
			<-ctx.Done()
			return bus.Retry(ctx.Err(), time.Minute) // overruled: stopping hands it back now
		}), bus.WorkerConfig{SoftStop: 300 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		<-started
		stop(w, cancel)
		if got := rec.get(); len(got) != 1 || got[0].ctxErr == nil {
			t.Fatalf("after the stop: calls %+v, want one, cancelled", got)
		}
		var again calls
		b.worker(again.recording(func(context.Context, jetstream.Msg, uint64) error { return nil }), bus.WorkerConfig{})
		testkit.Eventually(t, 10*time.Second, func() bool { return len(again.get()) == 1 },
			"the cancelled message did not reach another worker (handed back with a delay, or left to its 30s ack wait?)")
		if got := again.get(); got[0].delivered != 2 {
			t.Errorf("the other worker got delivery %d, want 2", got[0].delivered)
		}
	}
	t.Run("soft stop timeout cancels", func(t *testing.T) {
		t.Parallel()
		hardStop(t, func(w *bus.Worker, _ context.CancelFunc) {
			start := time.Now()
			w.Stop()
			if took := time.Since(start); took < 300*time.Millisecond {
				t.Errorf("Stop returned after %s, before SoftStop", took)
			}
		})
	})
	t.Run("start ctx ends", func(t *testing.T) {
		t.Parallel()
		hardStop(t, func(w *bus.Worker, cancelStart context.CancelFunc) {
			cancelStart()
			start := time.Now()
			w.Stop()
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("Stop after a hard stop took %s", took)
			}
		})
	})
}

// TestWorkerConsumerRecreated: a consumer deleted under a running worker,
// while it waits on a fetch or while its only slot is busy (so the next
// fetch finds nobody there), is created again through Recreate, and work
// resumes on its own.
func TestWorkerConsumerRecreated(t *testing.T) {
	t.Parallel()
	b := newBench(t, 30*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	var rec calls
	b.worker(rec.recording(func(_ context.Context, msg jetstream.Msg, _ uint64) error {
		if string(msg.Data()) == "block" {
			close(started)
			<-release
		}
		return nil
	}), bus.WorkerConfig{FetchWait: 200 * time.Millisecond})
	handled := func(data string) func() bool {
		return func() bool {
			return slices.ContainsFunc(rec.get(), func(c call) bool { return c.data == data })
		}
	}
	deleteConsumer := func() {
		if err := b.js.DeleteConsumer(opCtx(t), b.stream, b.ccfg.Durable); err != nil {
			t.Fatal(err)
		}
	}
	b.publish("before")
	testkit.Eventually(t, 10*time.Second, handled("before"), "the first message was not handled")

	deleteConsumer()
	b.publish("after-idle")
	testkit.Eventually(t, 20*time.Second, handled("after-idle"), "deleted under a fetch: work did not resume (%d recreations)", b.recreated.Load())

	b.publish("block")
	<-started
	deleteConsumer()
	b.publish("after-busy")
	close(release)
	testkit.Eventually(t, 20*time.Second, handled("after-busy"), "deleted between fetches: work did not resume (%d recreations)", b.recreated.Load())
	if n := b.recreated.Load(); n < 2 {
		t.Errorf("%d recreations, want one per deletion", n)
	}
}

// TestWorkerRetryDelays: Retry(err, d) hands the message back to come
// again after d; a plain error, or a panic (recovered), after RetryDelay.
func TestWorkerRetryDelays(t *testing.T) {
	t.Parallel()
	const retryDelay = 400 * time.Millisecond
	for _, tc := range []struct {
		name   string
		err    error // of the first delivery
		panics bool  // instead
		want   time.Duration
	}{
		{"Retry names the delay", bus.Retry(errors.New("later"), 700*time.Millisecond), false, 700 * time.Millisecond},
		{"a plain error waits RetryDelay", errors.New("bus down"), false, retryDelay},
		{"a panic waits RetryDelay", nil, true, retryDelay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBench(t, 30*time.Second)
			b.publish("m")
			var rec calls
			b.worker(rec.recording(func(_ context.Context, _ jetstream.Msg, delivered uint64) error {
				switch {
				case delivered == 1 && tc.panics:
					panic("handler bug")
				case delivered == 1:
					return tc.err
				}
				return nil
			}), bus.WorkerConfig{RetryDelay: retryDelay})
			testkit.Eventually(t, 10*time.Second, func() bool { return len(rec.get()) == 2 }, "the message did not come again")
			got := rec.get()
			if gap := got[1].start.Sub(got[0].end); gap < tc.want || got[1].delivered != 2 {
				t.Errorf("delivered again %s after the error (delivery %d), want after %s", gap, got[1].delivered, tc.want)
			}
			testkit.Eventually(t, 10*time.Second, b.settledAll, "message left unsettled: %+v", b.info())
		})
	}
}

// TestWorkerSettled: a handler that returns ErrSettled owns its message's
// fate: the worker neither acks nor naks it (here the handler did neither,
// so it comes again only after its 1s ack wait).
func TestWorkerSettled(t *testing.T) {
	t.Parallel()
	b := newBench(t, time.Second)
	b.publish("m")
	var rec calls
	b.worker(rec.recording(func(_ context.Context, _ jetstream.Msg, delivered uint64) error {
		if delivered == 1 {
			return fmt.Errorf("kept: %w", bus.ErrSettled)
		}
		return nil
	}), bus.WorkerConfig{RetryDelay: time.Millisecond})
	testkit.Eventually(t, 10*time.Second, func() bool { return len(rec.get()) == 2 }, "the unsettled message did not come again")
	if got := rec.get(); got[1].start.Sub(got[0].end) < 900*time.Millisecond {
		t.Errorf("delivered again %s after ErrSettled: the worker settled it", got[1].start.Sub(got[0].end))
	}
}

// TestWorkerDrop: Drop terminates the message with its reason, after
// keeping it in the dead-letter stream when DeadLetters is on; when the
// dead letter cannot be stored the message is handed back instead, never
// dropped unrecorded.
func TestWorkerDrop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		deadLetters bool
		ns          bus.Namespace // of the dead letters
		stored      bool
	}{
		{"dead-lettered, then terminated", true, bus.DefaultNamespace, true},
		{"terminated only", false, bus.DefaultNamespace, false},
		{"no DLQ stream: handed back", true, "nodlq", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := testkit.StartNATS(t).URL
			nc, js := testkit.Connect(t, url)
			topo, err := topology.Ensure(opCtx(t), js, topology.Config{Storage: jetstream.MemoryStorage})
			if err != nil {
				t.Fatal(err)
			}
			ns, stream := topo.NS, topo.NS.SamplesStream()
			terms := testkit.Terminations(t, nc, stream, bus.ConsumerVoters)
			if _, err := js.Publish(opCtx(t), ns.SampleSubject("acme", "j1"), []byte("poison")); err != nil {
				t.Fatal(err)
			}
			cons, err := js.Consumer(opCtx(t), stream, bus.ConsumerVoters)
			if err != nil {
				t.Fatal(err)
			}
			var rec calls
			h := rec.recording(func(_ context.Context, _ jetstream.Msg, delivered uint64) error {
				if delivered > 1 {
					return nil // handed back: taken on the next delivery
				}
				return bus.Drop(errors.New("cannot decode"), "malformed sample request")
			})
			w, err := bus.NewWorker(js, cons, h, bus.WorkerConfig{
				Recreate: func(ctx context.Context) (jetstream.Consumer, error) {
					return js.Consumer(ctx, stream, bus.ConsumerVoters)
				},
				DeadLetters: tc.deadLetters, Namespace: tc.ns, RetryDelay: 50 * time.Millisecond, SettleTimeout: 2 * time.Second,
				Logger: slog.New(slog.DiscardHandler),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Stop)

			if tc.ns.String() != ns.String() { // the dead letter had nowhere to go
				testkit.Eventually(t, 10*time.Second, func() bool { return len(rec.get()) == 2 }, "the message was not handed back: %+v", rec.get())
				if got := terms(); len(got) != 0 {
					t.Errorf("terminated %+v although its dead letter was not stored", got)
				}
				return
			}
			testkit.Eventually(t, 10*time.Second, func() bool { return len(terms()) == 1 }, "the message was not terminated")
			if got := terms()[0]; got.Reason != "malformed sample request" || got.Deliveries != 1 {
				t.Errorf("termination %+v, want the reason on the first delivery", got)
			}
			dls, err := bus.ListDeadLetters(opCtx(t), js, ns, "acme", "j1", 10)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.stored {
				if len(dls) != 0 {
					t.Errorf("dead letters %+v with DeadLetters off", dls)
				}
				return
			}
			if len(dls) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dls))
			}
			d := dls[0]
			if d.Reason != "malformed sample request" || string(d.Data) != "poison" || d.Stream != stream ||
				d.Subject != ns.SampleSubject("acme", "j1") || d.Consumer != bus.ConsumerVoters || d.Deliveries != 1 || d.Seq != 1 {
				t.Errorf("dead letter %+v: want the original, where it came from and why", d)
			}
			if got := rec.get(); len(got) != 1 {
				t.Errorf("%d calls, want 1: a dropped message is not delivered again", len(got))
			}
		})
	}
}

// TestWorkerStopStrandsNothing: a message that reaches a worker as it is
// stopped (its pull was already out at the server) is handled at once, by
// that worker or, handed back, by the next one: none is left delivered
// but unseen until its 30s ack wait runs out. The race is narrow, so it
// is run many times.
func TestWorkerStopStrandsNothing(t *testing.T) {
	t.Parallel()
	const rounds = 15
	b := newBench(t, 30*time.Second)
	var rec calls
	h := rec.recording(func(context.Context, jetstream.Msg, uint64) error { return nil })
	for i := range rounds {
		w := b.worker(h, bus.WorkerConfig{FetchWait: 300 * time.Millisecond})
		testkit.Eventually(t, 10*time.Second, func() bool { return b.info().NumWaiting >= 1 }, "worker %d never pulled", i)
		// The message and the stop cross: the server hands the message to
		// the worker's pull while the worker is giving it up.
		if err := b.nc.Publish("w.x", fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
		w.Stop()
	}
	b.worker(h, bus.WorkerConfig{Concurrency: 4})
	testkit.Eventually(t, 10*time.Second, func() bool { return len(rec.get()) == rounds },
		"%d of %d messages handled (consumer %+v)", len(rec.get()), rounds, b.info())
}

// TestNewWorkerValidates: a worker needs its dependencies and a Recreate,
// takes only sane figures, starts once, and may be stopped before Start.
func TestNewWorkerValidates(t *testing.T) {
	t.Parallel()
	b := newBench(t, 30*time.Second)
	cons, err := b.js.Consumer(opCtx(t), b.stream, b.ccfg.Durable)
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, jetstream.Msg) error { return nil }
	for _, cfg := range []bus.WorkerConfig{
		{},
		{Recreate: b.recreate, Concurrency: -1},
		{Recreate: b.recreate, Concurrency: 10_001},
		{Recreate: b.recreate, SoftStop: -time.Second},
		{Recreate: b.recreate, Namespace: "Bad"},
	} {
		if _, err := bus.NewWorker(b.js, cons, h, cfg); err == nil {
			t.Errorf("NewWorker accepted %+v", cfg)
		}
	}
	if _, err := bus.NewWorker(b.js, nil, h, bus.WorkerConfig{Recreate: b.recreate}); !errors.Is(err, bus.ErrWorker) {
		t.Errorf("NewWorker without a consumer: %v", err)
	}
	w := b.newWorker(h, bus.WorkerConfig{})
	w.Stop()
	if err := w.Start(context.Background()); !errors.Is(err, bus.ErrWorker) {
		t.Errorf("Start after Stop: %v, want ErrWorker", err)
	}
	w = b.worker(h, bus.WorkerConfig{})
	if err := w.Start(context.Background()); !errors.Is(err, bus.ErrWorker) {
		t.Errorf("a second Start: %v, want ErrWorker", err)
	}
}
