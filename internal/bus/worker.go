package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/schemas"
)

// Worker is the one consume loop of a durable pull consumer: the voter,
// the judge and the coordinator's job intake each run one, with their own
// Handler. It
//
//   - reserves a slot before it fetches: a fetch asks for as many messages
//     as there are free slots, so the worker never holds a message it is
//     not working on (one whose ack timer runs, which another worker could
//     have taken). Each slot is a long-lived goroutine, so a fetched
//     message never waits and handlers keep their grown stacks;
//   - reports a message in progress every third of the consumer's AckWait
//     while its handler runs, so handlers may take longer than AckWait;
//   - settles each message by what its handler returned (below), and
//     turns a handler's panic into a retry;
//   - creates its consumer again (WorkerConfig.Recreate) when a fetch finds
//     it deleted, and backs off (capped) while fetches fail;
//   - stops in two stages (Stop): no more fetching, then the handlers in
//     flight get up to SoftStop to finish before their ctx is cancelled.
//
// A handler's error decides its message's fate:
//
//	nil                      Ack (confirmed by the server first with DoubleAck)
//	ErrSettled (wrapped)     nothing: the handler acked, nak'd or terminated it
//	Drop(err, reason)        kept in the DLQ with the reason (DeadLetters), then
//	                         TermWithReason; NakWithDelay(RetryDelay) instead if
//	                         the dead letter cannot be stored
//	any other, once the      Nak: handed back at once for another worker
//	worker cancelled it
//	Retry(err, delay)        NakWithDelay(delay)
//	any other, or a panic    NakWithDelay(RetryDelay)
//
// Shutdown order: Stop ends the fetch loop (its last fetch runs out, and
// what it brings is handled), waits up to SoftStop for the handlers,
// cancels their ctx (they hand their messages back), waits for them.
type Worker struct {
	js  jetstream.JetStream
	h   Handler
	cfg WorkerConfig
	log *slog.Logger

	cons      jetstream.Consumer // the fetch loop's; replaced by Recreate
	consumer  string             // the consumer's name, for dead letters
	keepAlive atomic.Int64       // InProgress interval: a third of AckWait
	holdOff   atomic.Int64       // no fetch before this (unix nanoseconds; HoldOff)

	mu        sync.Mutex
	started   bool
	stopped   bool
	stopFetch context.CancelFunc // ends the fetch loop
	cancel    context.CancelFunc // cancels the handlers
	done      chan struct{}      // closed once the loop and every handler ended
	stopOnce  sync.Once
}

// Handler works on one message; its error decides the message's fate (see
// Worker). ctx is cancelled when the worker stops for good.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// WorkerConfig configures a Worker. Zero fields take the documented
// defaults.
type WorkerConfig struct {
	// Recreate returns the consumer anew, creating the topology (again)
	// where it is missing. The worker calls it when a fetch finds its
	// consumer gone (reset by an operator, lost by a server), so work
	// resumes on its own. Required.
	Recreate func(ctx context.Context) (jetstream.Consumer, error)
	// Concurrency is how many messages are handled at once. Default 1.
	Concurrency int
	// FetchWait bounds one fetch (a fetch ends early once it has its
	// messages). An idle worker asks again this often, and a stopping one
	// waits for its last fetch to end, so it is short. Default 1s.
	FetchWait time.Duration
	// SoftStop is how long Stop lets handlers in flight finish before it
	// cancels them. Default 30s.
	SoftStop time.Duration
	// RetryDelay is how long a message waits for redelivery after a
	// handler error that names no delay, a panic, or a dead letter that
	// could not be stored. Default 1s.
	RetryDelay time.Duration
	// DoubleAck waits for the server to confirm each ack before the slot
	// is free again: until then the message still counts as held, and a
	// lost ack would have it handled twice. Default false.
	DoubleAck bool
	// SettleTimeout bounds a confirmed ack and storing a dead letter.
	// Default 10s.
	SettleTimeout time.Duration
	// DeadLetters keeps each dropped message, with its reason, in the
	// dead-letter stream of Namespace before it is terminated. Default
	// false: a drop only terminates.
	DeadLetters bool
	// Namespace whose dead-letter stream DeadLetters uses; "" is
	// DefaultNamespace.
	Namespace Namespace
	// Redact cleans what the worker logs of a handler's panic, for
	// handlers that may hold secrets. Default: logged as it is.
	Redact func(string) string
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
}

func (c *WorkerConfig) defaults() error {
	if c.Recreate == nil {
		return fmt.Errorf("%w: Recreate is required", ErrWorker)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.FetchWait == 0 {
		c.FetchWait = time.Second
	}
	if c.SoftStop == 0 {
		c.SoftStop = 30 * time.Second
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = time.Second
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Concurrency < 1 || c.Concurrency > 10_000 {
		return fmt.Errorf("%w: Concurrency must be between 1 and 10000, got %d", ErrWorker, c.Concurrency)
	}
	if c.FetchWait < 0 || c.SoftStop < 0 || c.RetryDelay < 0 || c.SettleTimeout < 0 {
		return fmt.Errorf("%w: negative duration in %+v", ErrWorker, *c)
	}
	return c.Namespace.Validate()
}

// NewWorker returns a Worker that pulls from cons and hands each message
// to h; js stores dead letters.
func NewWorker(js jetstream.JetStream, cons jetstream.Consumer, h Handler, cfg WorkerConfig) (*Worker, error) {
	if js == nil || cons == nil || h == nil {
		return nil, fmt.Errorf("%w: nil JetStream, consumer or handler", ErrWorker)
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	w := &Worker{js: js, h: h, cfg: cfg, log: cfg.Logger, done: make(chan struct{})}
	if info := cons.CachedInfo(); info != nil {
		w.consumer = info.Name
	}
	w.setConsumer(cons)
	return w, nil
}

// setConsumer makes cons the one to fetch from, keeping alive at a third
// of its AckWait (of the server's default 30s when it is not known).
func (w *Worker) setConsumer(cons jetstream.Consumer) {
	w.cons = cons
	ackWait := 30 * time.Second
	if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
		ackWait = info.Config.AckWait
	}
	w.keepAlive.Store(int64(ackWait / 3))
}

// Start begins fetching and returns at once. ctx bounds the handlers:
// ending it is a hard stop (handlers cancelled, their messages handed
// back); Stop is the graceful one, and must follow either way.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.stopped {
		return fmt.Errorf("%w: started twice, or after Stop", ErrWorker)
	}
	w.started = true
	hctx, cancel := context.WithCancel(ctx)
	fctx, stopFetch := context.WithCancel(hctx)
	w.cancel, w.stopFetch = cancel, stopFetch
	go w.loop(fctx, hctx) // owned: Stop waits for done
	return nil
}

// Stop stops fetching, lets handlers in flight finish for up to SoftStop,
// then cancels them, and returns once every handler has returned and its
// message is settled. It may be called more than once, and before Start.
func (w *Worker) Stop() {
	w.stopOnce.Do(func() {
		w.mu.Lock()
		w.stopped = true
		started := w.started
		w.mu.Unlock()
		if !started {
			return
		}
		w.stopFetch()
		t := time.NewTimer(w.cfg.SoftStop)
		defer t.Stop()
		select {
		case <-w.done:
		case <-t.C:
			w.log.Warn("soft stop timeout: cancelling the messages in hand, they are handed back", "soft_stop", w.cfg.SoftStop)
			w.cancel()
			<-w.done
		}
		w.cancel()
	})
}

// Run works until ctx is done, then stops gracefully (Stop) and returns.
func (w *Worker) Run(ctx context.Context) error {
	// The handlers' ctx ends only through Stop: ending ctx is the signal
	// to stop, not to drop the work in hand.
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	w.Stop()
	return nil
}

// HoldOff stops fetching until t: the messages in hand go on, and no new
// one is taken before then (a later t extends the hold, an earlier one
// does not shorten it). A handler calls it when its messages cannot be
// served for a while (the voter: the provider refuses its key or model),
// so the consumer's messages go to workers that can serve them instead
// of being taken and handed back here, each time using up a delivery.
func (w *Worker) HoldOff(t time.Time) {
	n := t.UnixNano()
	for {
		cur := w.holdOff.Load()
		if n <= cur || w.holdOff.CompareAndSwap(cur, n) {
			return
		}
	}
}

// waitHoldOff waits out a hold (HoldOff), as long as it lasts; false when
// fetchCtx ended first.
func (w *Worker) waitHoldOff(fetchCtx context.Context) bool {
	for {
		d := time.Until(time.Unix(0, w.holdOff.Load()))
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-fetchCtx.Done():
			t.Stop()
			return false
		}
	}
}

// loop fetches into free slots until fetchCtx ends; ctx is the handlers'.
func (w *Worker) loop(fetchCtx, ctx context.Context) {
	defer close(w.done)
	slots := make(chan struct{}, w.cfg.Concurrency)
	for range w.cfg.Concurrency {
		slots <- struct{}{}
	}
	msgs := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range w.cfg.Concurrency {
		wg.Go(func() { // owned: ends when the loop closes msgs
			for msg := range msgs {
				w.handle(ctx, msg)
				slots <- struct{}{}
			}
		})
	}
	defer wg.Wait()
	defer close(msgs)
	backoff := time.Duration(0)
	for {
		select {
		case <-slots:
		case <-fetchCtx.Done():
			return
		}
		n := 1
	more:
		for n < w.cfg.Concurrency {
			select {
			case <-slots:
				n++
			default:
				break more
			}
		}
		if fetchCtx.Err() != nil || !w.waitHoldOff(fetchCtx) {
			return
		}
		got, err := w.fetch(fetchCtx, n, msgs)
		for ; got < n; got++ {
			slots <- struct{}{}
		}
		switch {
		case fetchCtx.Err() != nil:
			return
		case err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
			backoff = 0
			continue
		}
		backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
		w.log.Warn("fetch failed", "consumer", w.consumer, "err", err, "retry_in", backoff)
		// A deleted consumer fails the fetch waiting on it, and nobody
		// answers the fetches after that.
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders) {
			if cons, err := w.cfg.Recreate(fetchCtx); err != nil {
				w.log.Warn("create the consumer again", "consumer", w.consumer, "err", err)
			} else {
				w.setConsumer(cons)
				w.log.Info("consumer created again", "consumer", w.consumer)
			}
		}
		select {
		case <-time.After(backoff):
		case <-fetchCtx.Done():
			return
		}
	}
}

// fetch asks for n messages and hands each to a worker (one is free for
// each: its slot was reserved); it returns how many came.
func (w *Worker) fetch(ctx context.Context, n int, msgs chan<- jetstream.Msg) (int, error) {
	// Not cut short when ctx ends: a pull cancelled only on our side stays
	// open at the server until it expires, and a message delivered into
	// it would sit unseen until its ack wait ran out. What the last fetch
	// brings is handled like the messages in hand.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.FetchWait)
	defer cancel()
	batch, err := w.cons.Fetch(n, jetstream.FetchContext(fctx))
	if err != nil {
		return 0, err
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		msgs <- msg
	}
	return got, batch.Error()
}

// handle runs the handler on msg, keeping msg alive meanwhile, and
// settles it.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	if ctx.Err() != nil {
		// Fetched after the handlers were cancelled: hand it back at once.
		w.settle(ctx, msg, ctx.Err())
		return
	}
	stop := keepAlive(msg, time.Duration(w.keepAlive.Load()))
	err := w.call(ctx, msg)
	stop()
	w.settle(ctx, msg, err)
}

// errPanic is the retry a handler's panic becomes.
var errPanic = errors.New("bus: handler panicked")

// call runs the handler, turning a panic into a retry.
func (w *Worker) call(ctx context.Context, msg jetstream.Msg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			text := fmt.Sprintf("%v\n%s", p, debug.Stack())
			if w.cfg.Redact != nil {
				text = w.cfg.Redact(text)
			}
			w.log.Error("handler panicked; the message will be delivered again", "subject", msg.Subject(), "panic", text)
			err = Retry(errPanic, w.cfg.RetryDelay)
		}
	}()
	return w.h(ctx, msg)
}

// settle decides msg's fate by the handler's err (see Worker).
func (w *Worker) settle(ctx context.Context, msg jetstream.Msg, err error) {
	var drop *dropError
	var retry *retryError
	switch {
	case err == nil:
		if err := w.ack(ctx, msg); err != nil {
			w.log.Warn("ack not confirmed; the message may be delivered again", "subject", msg.Subject(), "err", err)
		}
		return
	case errors.Is(err, ErrSettled):
		return
	case errors.As(err, &drop):
		err = w.drop(ctx, msg, drop.reason)
	case ctx.Err() != nil:
		err = msg.Nak()
	case errors.As(err, &retry):
		err = msg.NakWithDelay(retry.delay)
	default:
		err = msg.NakWithDelay(w.cfg.RetryDelay)
	}
	if err != nil {
		w.log.Warn("settle message; it is delivered again after its ack wait", "subject", msg.Subject(), "err", err)
	}
}

func (w *Worker) ack(ctx context.Context, msg jetstream.Msg) error {
	if !w.cfg.DoubleAck {
		return msg.Ack()
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.SettleTimeout)
	defer cancel()
	return msg.DoubleAck(actx)
}

// drop gives up on msg for good: it keeps the original and the reason in
// the dead-letter stream (for `maker dlq`), when configured to, then
// terminates it so it is never delivered again. If the dead letter cannot
// be stored, msg is handed back instead: nothing is dropped unrecorded.
func (w *Worker) drop(ctx context.Context, msg jetstream.Msg, reason string) error {
	if w.cfg.DeadLetters {
		dl := schemas.DeadLetter{
			Header: schemas.NewHeader(schemas.KindDeadLetter), Subject: msg.Subject(), Reason: reason,
			Consumer: w.consumer, Data: msg.Data(), At: time.Now().UTC(),
		}
		if md, err := msg.Metadata(); err == nil {
			dl.Stream, dl.Seq, dl.Deliveries = md.Stream, md.Sequence.Stream, md.NumDelivered
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.SettleTimeout)
		defer cancel()
		if err := PublishDeadLetter(pctx, w.js, w.cfg.Namespace, &dl); err != nil {
			w.log.Error("store dead letter; handing the message back", "subject", msg.Subject(), "reason", reason, "err", err)
			return msg.NakWithDelay(w.cfg.RetryDelay)
		}
	}
	return msg.TermWithReason(reason)
}

// keepAlive reports msg in progress every d until stopped, so its handler
// may take longer than the consumer's AckWait.
func keepAlive(msg jetstream.Msg, d time.Duration) (stop func()) {
	if d <= 0 {
		return func() {}
	}
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	// Held while t is assigned: the callback may fire before AfterFunc
	// returns when d is short, and it reads t.
	mu.Lock()
	t = time.AfterFunc(d, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = msg.InProgress()
		t.Reset(d)
	})
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// Retry returns an error that has the Worker hand the message back, to be
// delivered again after delay.
func Retry(err error, delay time.Duration) error { return &retryError{err: err, delay: delay} }

// Drop returns an error that has the Worker give up on the message for
// good, for reason (kept with the dead letter and the termination).
func Drop(err error, reason string) error {
	if reason == "" && err != nil {
		reason = err.Error()
	}
	if reason == "" {
		reason = "dropped by its handler" // a dead letter needs a reason
	}
	return &dropError{err: err, reason: reason}
}

type retryError struct {
	err   error
	delay time.Duration
}

func (e *retryError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("bus: retry in %s", e.delay)
	}
	return e.err.Error()
}

func (e *retryError) Unwrap() error { return e.err }

type dropError struct {
	err    error
	reason string
}

func (e *dropError) Error() string {
	if e.err == nil {
		return e.reason
	}
	return e.reason + ": " + e.err.Error()
}

func (e *dropError) Unwrap() error { return e.err }
