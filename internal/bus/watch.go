package bus

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// watchAttemptTimeout bounds one try at starting a bucket watch (the
// request that creates its ordered consumer); a variable for the tests.
var watchAttemptTimeout = 5 * time.Second

// errWatchAttempt ends a watch's creation request that took longer than
// watchAttemptTimeout.
var errWatchAttempt = errors.New("bus: watch not started in time")

// watchKV is a bucket whose watches survive the loss of a NATS node.
//
// A watch starts with a JetStream API request that creates its ordered
// consumer, and a JetStream cluster drops such requests without an answer
// while it has no meta leader or the request's server is going away (the
// moment a node dies): nats.go waits for the answer until the watch's
// context ends, which for a caller such as jobs.Wait is its whole wait,
// or for ever. Once created, an ordered consumer recreates itself after a
// node loss; only its creation needs this. So each try here is bounded by
// watchAttemptTimeout and tried again (Transient failures too, backing
// off up to 2s) until ctx ends.
//
// Keys, ListKeys, ListKeysFiltered and History are built on Watch here, as
// jetstream builds them on its own.
type watchKV struct{ jetstream.KeyValue }

// Resilient returns kv with watches that survive a node loss (watchKV).
func Resilient(kv jetstream.KeyValue) jetstream.KeyValue {
	if kv == nil {
		return nil
	}
	if _, ok := kv.(watchKV); ok {
		return kv
	}
	return watchKV{kv}
}

func (k watchKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return startWatch(ctx, func(actx context.Context) (jetstream.KeyWatcher, error) {
		return k.KeyValue.Watch(actx, keys, opts...)
	})
}

func (k watchKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return startWatch(ctx, func(actx context.Context) (jetstream.KeyWatcher, error) {
		return k.KeyValue.WatchAll(actx, opts...)
	})
}

func (k watchKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return startWatch(ctx, func(actx context.Context) (jetstream.KeyWatcher, error) {
		// jetstream prefixes keys in place: each try gets a fresh copy.
		return k.KeyValue.WatchFiltered(actx, slices.Clone(keys), opts...)
	})
}

func (k watchKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	w, err := k.WatchAll(ctx, append(opts, jetstream.IgnoreDeletes(), jetstream.MetaOnly())...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var keys []string
	for e := range w.Updates() {
		if e == nil {
			break
		}
		keys = append(keys, e.Key())
	}
	if len(keys) == 0 {
		return nil, jetstream.ErrNoKeysFound
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

func (k watchKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	w, err := k.WatchAll(ctx, append(opts, jetstream.IgnoreDeletes(), jetstream.MetaOnly())...)
	if err != nil {
		return nil, err
	}
	return listKeys(ctx, w), nil
}

func (k watchKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	w, err := k.WatchFiltered(ctx, filters, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return nil, err
	}
	return listKeys(ctx, w), nil
}

func (k watchKV) History(ctx context.Context, key string, opts ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	w, err := k.Watch(ctx, key, append(opts, jetstream.IncludeHistory())...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var entries []jetstream.KeyValueEntry
	for e := range w.Updates() {
		if e == nil {
			break
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return nil, jetstream.ErrKeyNotFound
	}
	return entries, nil
}

// keyLister lists the keys a watch's initial values hold, then stops it.
type keyLister struct {
	w    jetstream.KeyWatcher
	keys chan string
}

func listKeys(ctx context.Context, w jetstream.KeyWatcher) *keyLister {
	kl := &keyLister{w: w, keys: make(chan string, 256)}
	go func() { // owned: ends with the initial values, Stop or ctx
		defer close(kl.keys)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok || e == nil {
					return
				}
				select {
				case kl.keys <- e.Key():
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return kl
}

func (kl *keyLister) Keys() <-chan string { return kl.keys }
func (kl *keyLister) Stop() error         { return kl.w.Stop() }

// startWatch calls start until it returns a watcher: each try under a
// context of its own, derived from ctx, that watchAttemptTimeout cancels
// unless the watcher started in time. That context lives on as the
// watcher's (nats.go unsubscribes the watch when it ends), until ctx ends
// or the watcher is stopped.
func startWatch(ctx context.Context, start func(context.Context) (jetstream.KeyWatcher, error)) (jetstream.KeyWatcher, error) {
	backoff := 100 * time.Millisecond
	for {
		actx, cancel := context.WithCancelCause(ctx)
		timer := time.AfterFunc(watchAttemptTimeout, func() { cancel(errWatchAttempt) })
		w, err := start(actx)
		if err == nil && timer.Stop() {
			return &stopWatcher{KeyWatcher: w, cancel: func() { cancel(context.Canceled) }}, nil
		}
		if err == nil { // started just as the timer fired: it is being unsubscribed
			_ = w.Stop()
		}
		timedOut := errors.Is(context.Cause(actx), errWatchAttempt)
		cancel(context.Canceled)
		if ctx.Err() != nil {
			// The caller's end is the reason, also when an attempt's own
			// timeout cancelled it a moment before.
			if err == nil || timedOut || errors.Is(err, context.Canceled) {
				err = ctx.Err()
			}
			return nil, err
		}
		if err != nil && !timedOut && !Transient(err) {
			return nil, err
		}
		if !timedOut { // a quick failure: do not hammer the server
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// stopWatcher is a watcher that releases its context when stopped.
type stopWatcher struct {
	jetstream.KeyWatcher
	once   sync.Once
	cancel func()
}

func (w *stopWatcher) Stop() error {
	err := w.KeyWatcher.Stop()
	w.once.Do(w.cancel)
	return err
}
