// Package inputs keeps jobs' big params once, in the fleet's inputs store
// (a JetStream object store, bus.Namespace.InputsBucket), named by their
// content: schemas.InputRef, "sha256:" and the hex SHA-256 of the bytes.
// Messages then carry the name instead of the params (JobSpec.ParamsRef,
// SampleRequest.ParamsRef), so a step costs the same whatever the input's
// size, and params larger than a message fit.
//
// A name is its own proof: Get hashes what it read and refuses bytes that
// do not match, so a store written by someone else (or corrupted) can make
// a job fail, never make it run on other params. The writers are the
// submitters (the api, the admin's CLI, the coordinators' batch runner);
// voters and the simulated model only read.
package inputs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// Sentinel errors.
var (
	// ErrNotFound: no input of that reference is stored (never stored, or
	// older than the store's TTL).
	ErrNotFound = errors.New("inputs: not in the inputs store")
	// ErrCorrupt: the stored bytes do not hash to their reference.
	ErrCorrupt = errors.New("inputs: stored bytes do not match their reference")
	// ErrTooBig: more than schemas.MaxParamsBytes.
	ErrTooBig = errors.New("inputs: too big")
	// ErrNoStore: the fleet has no inputs store (made by an older
	// release): `maker topology create` or a coordinator's start makes it.
	ErrNoStore = errors.New("inputs: the fleet has no inputs store (start a coordinator of this release, or run maker topology create)")
	// ErrBadRef: not a well-formed reference.
	ErrBadRef = errors.New("inputs: not an input reference")
	// ErrUnavailable: the store did not answer (a timeout, the server
	// away): trying again later may work, unlike every other error here.
	ErrUnavailable = errors.New("inputs: the inputs store did not answer")
)

// Config configures a Store.
type Config struct {
	// CacheBytes bounds the bytes of params kept in memory after a Get.
	// Default 64 MiB; -1 keeps none.
	CacheBytes int64
	// Refresh is how old a stored input may be before Put stores it again
	// (restarting the store's TTL). Default half topology.InputsTTL
	// (15 days).
	Refresh time.Duration
}

func (c *Config) defaults() {
	switch {
	case c.CacheBytes == 0:
		c.CacheBytes = 64 << 20
	case c.CacheBytes < 0:
		c.CacheBytes = 0
	}
	if c.Refresh == 0 {
		c.Refresh = 15 * 24 * time.Hour
	}
}

// Store reads and writes the inputs store of one namespace. It binds the
// object store at first use. Safe for concurrent use.
type Store struct {
	js     jetstream.JetStream
	bucket string
	cfg    Config

	mu  sync.Mutex
	obs jetstream.ObjectStore

	cache *cache
}

// New returns the inputs store of namespace ns on js.
func New(js jetstream.JetStream, ns bus.Namespace, cfg Config) *Store {
	cfg.defaults()
	return &Store{js: js, bucket: ns.InputsBucket(), cfg: cfg, cache: newCache(cfg.CacheBytes)}
}

func (s *Store) store(ctx context.Context) (jetstream.ObjectStore, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.obs != nil {
		return s.obs, nil
	}
	obs, err := s.js.ObjectStore(ctx, s.bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoStore
	}
	if err != nil {
		return nil, fmt.Errorf("%w: bind %s: %w", ErrUnavailable, s.bucket, err)
	}
	s.obs = obs
	return obs, nil
}

// Put stores data and returns its reference. Data already stored (and
// stored less than Config.Refresh ago) is not sent again.
func (s *Store) Put(ctx context.Context, data []byte) (string, error) {
	if len(data) > schemas.MaxParamsBytes {
		return "", fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooBig, len(data), schemas.MaxParamsBytes)
	}
	obs, err := s.store(ctx)
	if err != nil {
		return "", err
	}
	ref := schemas.InputRef(data)
	info, err := obs.GetInfo(ctx, ref)
	switch {
	case err == nil && !info.Deleted && info.Size == uint64(len(data)) && time.Since(info.ModTime) < s.cfg.Refresh:
		return ref, nil
	case err != nil && !errors.Is(err, jetstream.ErrObjectNotFound):
		return "", fmt.Errorf("%w: look up %s: %w", ErrUnavailable, ref, err)
	}
	if _, err := obs.PutBytes(ctx, ref, data); err != nil {
		return "", fmt.Errorf("inputs: store %s (%d bytes): %w", ref, len(data), err)
	}
	s.cache.put(ref, data)
	return ref, nil
}

// Get returns the bytes ref names, checked against it. Recently read ones
// come from memory: a voter binds a job's params once, not once a step.
func (s *Store) Get(ctx context.Context, ref string) ([]byte, error) {
	if !schemas.ValidInputRef(ref) {
		return nil, fmt.Errorf("%w: %.80q", ErrBadRef, ref)
	}
	if b, ok := s.cache.get(ref); ok {
		return b, nil
	}
	obs, err := s.store(ctx)
	if err != nil {
		return nil, err
	}
	info, err := obs.GetInfo(ctx, ref)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: look up %s: %w", ErrUnavailable, ref, err)
	}
	if info.Size > schemas.MaxParamsBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrTooBig, ref, info.Size, schemas.MaxParamsBytes)
	}
	b, err := obs.GetBytes(ctx, ref)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrUnavailable, ref, err)
	}
	if schemas.InputRef(b) != ref {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, ref)
	}
	s.cache.put(ref, b)
	return b, nil
}
