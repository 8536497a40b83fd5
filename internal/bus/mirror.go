package bus

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Mirror keeps a bucket's records in memory, decoded, through a watch:
// reads cost no KV round trip, and a change written by any process
// reaches every mirror as the watch delivers it (within milliseconds).
// The quota store and the price table read their buckets through one.
// Safe for concurrent use.
type Mirror[T any] struct {
	raw    jetstream.KeyValue
	decode func([]byte) (T, error)

	mu      sync.RWMutex
	cache   map[string]T
	synced  bool          // the watch delivered the initial values
	changed chan struct{} // closed and replaced on every change
	stopped chan struct{} // closed when the watch ends (nil: never started)
}

// NewMirror returns the mirror of bucket kv, whose values decode reads (a
// value it refuses is left out). A nil kv mirrors an empty bucket.
func NewMirror[T any](kv jetstream.KeyValue, decode func([]byte) (T, error)) *Mirror[T] {
	return &Mirror[T]{raw: kv, decode: decode, cache: map[string]T{}, changed: make(chan struct{})}
}

// Start runs the watch that feeds the mirror until ctx ends (its goroutine
// is owned by the mirror and stops with ctx; Wait waits for it). It
// returns once the initial values are in, or with the error that kept the
// watch from starting.
func (m *Mirror[T]) Start(ctx context.Context) error {
	if m.raw == nil {
		m.mu.Lock()
		m.synced = true
		m.mu.Unlock()
		return nil
	}
	w, err := m.raw.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("bus: watch %s: %w", m.raw.Bucket(), err)
	}
	ready, stopped := make(chan struct{}), make(chan struct{})
	m.mu.Lock()
	m.stopped = stopped
	m.mu.Unlock()
	go func() { // owned: ends with ctx
		defer close(stopped)
		m.follow(ctx, w, ready)
	}()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait waits for the watch Start began to end (at once if none).
func (m *Mirror[T]) Wait() {
	m.mu.RLock()
	stopped := m.stopped
	m.mu.RUnlock()
	if stopped != nil {
		<-stopped
	}
}

// follow applies the bucket's updates until ctx ends or the watcher
// closes; then the mirror is no longer live.
func (m *Mirror[T]) follow(ctx context.Context, w jetstream.KeyWatcher, ready chan struct{}) {
	defer func() { _ = w.Stop() }()
	defer func() {
		m.mu.Lock()
		m.synced = false
		close(m.changed) // no longer live: a change too
		m.changed = make(chan struct{})
		m.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			m.apply(e, ready)
		}
	}
}

// apply puts one watch entry into the mirror (nil: the initial values are
// in).
func (m *Mirror[T]) apply(e jetstream.KeyValueEntry, ready chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e == nil {
		if !m.synced {
			m.synced = true
			close(ready)
			close(m.changed) // live now: a change too
			m.changed = make(chan struct{})
		}
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(m.cache, e.Key())
	} else {
		v, err := m.decode(e.Value())
		if err != nil {
			return // unreadable: keep what we had (the stores never write one)
		}
		m.cache[e.Key()] = v
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change the watch sees.
func (m *Mirror[T]) Changed() <-chan struct{} {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.changed
}

// Get returns key's value without blocking, whether the bucket holds one,
// and whether the mirror is live (Start ran and the watch holds).
func (m *Mirror[T]) Get(key string) (v T, found, live bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.synced {
		return v, false, false
	}
	v, found = m.cache[key]
	return v, found, true
}

// All returns a copy of every value by key, and whether the mirror is
// live (nil when it is not).
func (m *Mirror[T]) All() (map[string]T, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.synced {
		return nil, false
	}
	return maps.Clone(m.cache), true
}
