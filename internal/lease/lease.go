// Package lease gives one coordinator at a time ownership of a job, with a
// fencing token, through compare-and-set on a JetStream KV bucket.
//
// A lease is held until its ExpiresAt; the holder renews it well before.
// Any coordinator may take an expired (or released) lease, and doing so
// raises the token by one. Every write a holder makes that matters (journal
// entries, Redis epochs) carries the token, so a holder that was paused or
// cut off past its expiry (a "zombie") is refused as soon as a newer holder
// has written, and finds out at its next renewal.
//
// Expiry compares the lease's wall-clock time with the taker's clock:
// coordinators' clocks must agree to well within the TTL (NTP does).
package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// Sentinel errors.
var (
	// ErrHeld: another coordinator holds an unexpired lease.
	ErrHeld = errors.New("lease: held by another coordinator")
	// ErrLost: the lease was taken over (or deleted) since it was granted.
	ErrLost = errors.New("lease: lost")
)

// Lease is a held lease.
type Lease struct {
	schemas.Lease
	rev uint64
}

// Manager takes, renews and releases leases in one bucket.
type Manager struct {
	kv    *bus.KV[schemas.Lease]
	owner string
	ttl   time.Duration
	now   func() time.Time
}

// NewManager returns a Manager acting for owner, granting leases of ttl.
func NewManager(kv jetstream.KeyValue, owner string, ttl time.Duration) (*Manager, error) {
	if kv == nil || owner == "" || ttl < 100*time.Millisecond {
		return nil, fmt.Errorf("lease: need a bucket, an owner and a ttl >= 100ms (got %v)", ttl)
	}
	return &Manager{kv: bus.NewKV(kv, bus.MessageCodec[schemas.Lease]()), owner: owner, ttl: ttl, now: time.Now}, nil
}

// TTL is how long a lease lasts without renewal.
func (m *Manager) TTL() time.Duration { return m.ttl }

// Acquire takes the lease on tenant/job if it is free, expired or
// released, under the next token.
func (m *Manager) Acquire(ctx context.Context, tenant, job string) (*Lease, error) {
	key := bus.JobKey(tenant, job)
	l := schemas.Lease{Header: schemas.NewHeader(schemas.KindLease), Tenant: tenant, JobID: job, Owner: m.owner, Token: 1}
	cur, rev, err := m.kv.Get(ctx, key)
	switch {
	case errors.Is(err, bus.ErrNotFound):
		l.ExpiresAt = m.now().Add(m.ttl).UTC()
		rev, err := m.put(ctx, key, &l, 0)
		if err != nil {
			return nil, err
		}
		return &Lease{Lease: l, rev: rev}, nil
	case errors.Is(err, bus.ErrBadValue):
		// An unreadable lease cannot fence anything; replace it, keeping
		// tokens growing past anything it could have held.
		cur = &schemas.Lease{Token: int64(rev)}
	case err != nil:
		return nil, fmt.Errorf("lease: get %s: %w", key, err)
	case (cur.Owner != m.owner || cur.HoldOff) && m.now().Before(cur.ExpiresAt):
		// A lease in our own name is a leftover of this owner (a restart,
		// or a write whose reply was lost): take it over under a new token.
		return nil, fmt.Errorf("%w: %s holds %s until %s", ErrHeld, cur.Owner, key, cur.ExpiresAt.Format(time.RFC3339Nano))
	}
	l.Token = cur.Token + 1
	l.ExpiresAt = m.now().Add(m.ttl).UTC()
	rev, err = m.put(ctx, key, &l, rev)
	if errors.Is(err, ErrLost) {
		// Another coordinator took it between our read and our write.
		return nil, fmt.Errorf("%w: %s was taken meanwhile", ErrHeld, key)
	}
	if err != nil {
		return nil, err
	}
	return &Lease{Lease: l, rev: rev}, nil
}

// Renew extends l by the TTL. ErrLost means another coordinator holds it
// now: stop writing for the job at once.
func (m *Manager) Renew(ctx context.Context, l *Lease) error {
	next := l.Lease
	next.ExpiresAt = m.now().Add(m.ttl).UTC()
	key := bus.JobKey(l.Tenant, l.JobID)
	rev, err := m.put(ctx, key, &next, l.rev)
	if errors.Is(err, ErrLost) {
		// Maybe our last renewal landed but its reply was lost: the lease
		// is still ours if it holds our owner and token.
		if cur, crev, gerr := m.kv.Get(ctx, key); gerr == nil && cur.Owner == l.Owner && cur.Token == l.Token {
			l.rev = crev
			rev, err = m.put(ctx, key, &next, l.rev)
		}
	}
	if err != nil {
		return err
	}
	l.Lease, l.rev = next, rev
	return nil
}

// Release ends l after the given delay (at once for 0), so another
// coordinator may then take the job. A lease already lost is not an error.
// Leases are never deleted, not even a finished job's: the next token
// must always be above every token handed out before.
func (m *Manager) Release(ctx context.Context, l *Lease, after time.Duration) error {
	next := l.Lease
	next.ExpiresAt = time.Unix(0, 0).UTC()
	if after > 0 {
		next.ExpiresAt, next.HoldOff = m.now().Add(after).UTC(), true
	}
	_, err := m.put(ctx, bus.JobKey(l.Tenant, l.JobID), &next, l.rev)
	if errors.Is(err, ErrLost) {
		return nil
	}
	return err
}

// put writes l to key if the key is still at revision rev (0: absent). A
// lost race is ErrHeld when taking a free lease, else ErrLost.
func (m *Manager) put(ctx context.Context, key string, l *schemas.Lease, rev uint64) (uint64, error) {
	next, err := m.kv.PutAt(ctx, key, l, rev)
	switch {
	case errors.Is(err, bus.ErrConflict) && rev == 0:
		return 0, fmt.Errorf("%w: %s was taken meanwhile", ErrHeld, key)
	case errors.Is(err, bus.ErrConflict):
		return 0, fmt.Errorf("%w: %s changed since revision %d", ErrLost, key, rev)
	case err != nil:
		return 0, fmt.Errorf("lease: write %s: %w", key, err)
	}
	return next, nil
}
