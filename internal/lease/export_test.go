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

// SetClock makes m read the time from now, so tests can move a manager
// past a lease's expiry without waiting for it.
func SetClock(m *Manager, now func() time.Time) { m.now = now }

// Read returns the current lease on tenant/job, if any (for the tests:
// coordinators only ever compare-and-set).
func Read(ctx context.Context, kv jetstream.KeyValue, tenant, job string) (*schemas.Lease, error) {
	e, err := kv.Get(ctx, bus.JobKey(tenant, job))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lease: get: %w", err)
	}
	var l schemas.Lease
	if err := schemas.Decode(e.Value(), &l); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	return &l, nil
}
