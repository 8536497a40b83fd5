package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// Sentinel errors.
var (
	// ErrInvalid: a quota record that does not validate.
	ErrInvalid = errors.New("quota: invalid quota")
	// ErrNoBucket: the store has no quota bucket (a topology without one).
	ErrNoBucket = errors.New("quota: no quota bucket")
)

// Store reads and writes tenants' quotas (schemas.TenantQuota) in the quota
// bucket. After Start, reads come from a mirror the bucket's watch keeps
// current (bus.Mirror: a change applies within a second, no KV round trip
// per read); before it, each read asks the bucket. Safe for concurrent use.
type Store struct {
	raw    jetstream.KeyValue
	kv     *bus.KV[schemas.TenantQuota]
	mirror *bus.Mirror[schemas.TenantQuota]
}

// New returns the store over the topology's quota bucket.
func New(topo *topology.Topology) *Store {
	var kv jetstream.KeyValue
	if topo != nil {
		kv = topo.Quotas
	}
	return NewKV(kv)
}

// NewKV returns the store over bucket kv (nil: every tenant unlimited, Set
// fails with ErrNoBucket).
func NewKV(kv jetstream.KeyValue) *Store {
	s := &Store{raw: kv, mirror: bus.NewMirror(kv, func(data []byte) (schemas.TenantQuota, error) {
		var q schemas.TenantQuota
		err := schemas.Decode(data, &q)
		return q, err
	})}
	if kv != nil {
		s.kv = bus.NewKV(kv, bus.MessageCodec[schemas.TenantQuota]())
	}
	return s
}

// Start runs the watch that feeds the cache until ctx ends (its goroutine
// is owned by the store and stops with ctx). It returns once the initial
// values are in the cache, or with the error that kept the watch from
// starting.
func (s *Store) Start(ctx context.Context) error {
	if err := s.mirror.Start(ctx); err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	return nil
}

// Wait waits for the watch Start began to end (at once if none).
func (s *Store) Wait() { s.mirror.Wait() }

// Changed returns a channel closed at the next change the watch sees.
func (s *Store) Changed() <-chan struct{} { return s.mirror.Changed() }

// Cached returns key's record from the cache without blocking, and whether
// the cache is live (Start ran and the watch holds). A key with no record
// is the zero TenantQuota.
func (s *Store) Cached(key string) (schemas.TenantQuota, bool) {
	q, _, live := s.mirror.Get(key)
	return q, live
}

// Get returns the tenant's quotas: the zero value (no limits, weight 1)
// when none are set.
func (s *Store) Get(ctx context.Context, tenant string) (schemas.TenantQuota, error) {
	return s.get(ctx, tenant)
}

// Fleet returns the fleet-wide limits (the record under
// schemas.FleetQuotaKey): the zero value when none are set.
func (s *Store) Fleet(ctx context.Context) (schemas.TenantQuota, error) {
	return s.get(ctx, schemas.FleetQuotaKey)
}

func (s *Store) get(ctx context.Context, key string) (schemas.TenantQuota, error) {
	if q, ok := s.Cached(key); ok {
		return q, nil
	}
	if s.kv == nil {
		return schemas.TenantQuota{}, nil
	}
	q, _, err := s.kv.Get(ctx, key)
	if errors.Is(err, bus.ErrNotFound) {
		return schemas.TenantQuota{}, nil
	}
	if err != nil {
		return schemas.TenantQuota{}, fmt.Errorf("quota: read %s: %w", key, err)
	}
	return *q, nil
}

// Set stores q: under q.Tenant, or, with Tenant empty, as the fleet's
// limits. It fills the header and UpdatedAt, validates, and returns what
// it stored.
func (s *Store) Set(ctx context.Context, q schemas.TenantQuota) (schemas.TenantQuota, error) {
	if s.kv == nil {
		return q, ErrNoBucket
	}
	q.Header = schemas.NewHeader(schemas.KindTenantQuota)
	q.UpdatedAt = time.Now().UTC()
	if err := q.Validate(); err != nil {
		return q, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	key := q.Tenant
	if key == "" {
		key = schemas.FleetQuotaKey
	}
	if _, err := s.kv.Update(ctx, key, func(*schemas.TenantQuota) (*schemas.TenantQuota, error) { return &q, nil }); err != nil {
		return q, fmt.Errorf("quota: write %s: %w", key, err)
	}
	return q, nil
}

// Delete removes the tenant's record (its limits lapse); "" removes the
// fleet's. No record is no error.
func (s *Store) Delete(ctx context.Context, tenant string) error {
	if s.raw == nil {
		return ErrNoBucket
	}
	key := tenant
	if key == "" {
		key = schemas.FleetQuotaKey
	}
	if err := s.raw.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("quota: delete %s: %w", key, err)
	}
	return nil
}

// List returns every stored record, the fleet's (Tenant empty) first, then
// by tenant.
func (s *Store) List(ctx context.Context) ([]schemas.TenantQuota, error) {
	var out []schemas.TenantQuota
	all, synced := s.mirror.All()
	for _, q := range all {
		out = append(out, q)
	}
	if !synced && s.kv != nil {
		keys, err := s.raw.Keys(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, fmt.Errorf("quota: list: %w", err)
		}
		for _, k := range keys {
			q, _, err := s.kv.Get(ctx, k)
			if errors.Is(err, bus.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("quota: list: %w", err)
			}
			out = append(out, *q)
		}
	}
	slices.SortFunc(out, func(a, b schemas.TenantQuota) int {
		switch {
		case a.Tenant == b.Tenant:
			return 0
		case a.Tenant < b.Tenant:
			return -1
		}
		return 1
	})
	return out, nil
}
