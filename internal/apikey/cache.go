package apikey

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/schemas"
)

// Start runs the watch that keeps Authenticate's cache: it returns once the
// cache holds every key in the bucket, and the watch runs until ctx ends or
// Stop. While it runs, Authenticate reads no KV, and every write to the
// bucket (a revoke by any process) reaches the cache as the watch delivers
// it. If the watch ends (its context, or the bucket deleted), Authenticate
// reads the bucket again. Start twice is an error.
func (s *Store) Start(ctx context.Context) error {
	if s.raw == nil {
		return ErrNoBucket
	}
	s.runMu.Lock()
	defer s.runMu.Unlock()
	if s.done != nil {
		return errors.New("apikey: started twice")
	}
	wctx, cancel := context.WithCancel(ctx)
	w, err := s.raw.WatchAll(wctx)
	if err != nil {
		cancel()
		return fmt.Errorf("apikey: watch keys: %w", err)
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	s.cancel, s.done = cancel, done
	go func() {
		defer close(done)
		defer func() { _ = w.Stop() }()
		s.follow(wctx, w, ready)
	}()
	select {
	case <-ready:
		return nil
	case <-done:
		cancel()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("apikey: watch keys: %w", err)
		}
		return errors.New("apikey: watch keys: ended before the keys were read")
	}
}

// Stop ends the watch started by Start and waits for it; Authenticate then
// reads the bucket. Stop without Start does nothing.
func (s *Store) Stop() {
	s.runMu.Lock()
	cancel, done := s.cancel, s.done
	s.runMu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// follow applies the watch's entries to the cache until the watch or ctx
// ends, closing ready once the bucket's current keys are all in.
func (s *Store) follow(ctx context.Context, w jetstream.KeyWatcher, ready chan struct{}) {
	defer func() {
		s.mu.Lock()
		s.live = false
		s.cache = map[string]entry{}
		s.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				s.mu.Lock()
				s.live = true
				s.mu.Unlock()
				close(ready)
				continue
			}
			s.apply(e)
		}
	}
}

// apply files one watched entry: a put replaces the key's record unless
// the cache holds a newer revision; a delete or purge drops it.
func (s *Store) apply(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		s.mu.Lock()
		if cur, ok := s.cache[e.Key()]; !ok || cur.rev <= e.Revision() {
			delete(s.cache, e.Key())
		}
		s.mu.Unlock()
		return
	}
	var rec schemas.APIKey
	if err := schemas.Decode(e.Value(), &rec); err != nil {
		// An unreadable record authenticates nobody.
		s.log.Error("apikey: unreadable key record ignored", "hash", e.Key(), "revision", e.Revision(), "err", err)
		s.mu.Lock()
		delete(s.cache, e.Key())
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	s.put(e.Key(), rec, e.Revision())
	s.mu.Unlock()
}

// remember files rec, which this process read or wrote at revision rev,
// so its own writes apply at once, before the watch delivers them. Only a
// running cache keeps it.
func (s *Store) remember(hash string, rec schemas.APIKey, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live {
		s.put(hash, rec, rev)
	}
}

// put files rec at revision rev unless the cache holds a newer revision of
// it. Called with mu held.
func (s *Store) put(hash string, rec schemas.APIKey, rev uint64) {
	if cur, ok := s.cache[hash]; ok && cur.rev > rev {
		return
	}
	s.cache[hash] = entry{rec: rec, rev: rev}
}
