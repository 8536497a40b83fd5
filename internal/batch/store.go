package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/internal/webhook"
	"github.com/makerfleet/makerfleet/schemas"
)

// Store creates batches and reads and cancels them. It holds no state of
// its own: build one wherever a topology is at hand.
type Store struct {
	topo  *topology.Topology
	tasks jobs.Tasks
	recs  *bus.KV[schemas.BatchRecord]
}

// NewStore returns a Store on topo's batches bucket and stream; tasks
// checks the lines' tasks and params (a *taskreg.Registry). tasks may be
// nil for a Store that never creates batches.
func NewStore(topo *topology.Topology, tasks jobs.Tasks) *Store {
	return &Store{topo: topo, tasks: tasks, recs: records(topo)}
}

func records(topo *topology.Topology) *bus.KV[schemas.BatchRecord] {
	return bus.NewKV(topo.Batches, bus.MessageCodec[schemas.BatchRecord]())
}

// leaseSuffix ends the key of a batch's lease in the batches bucket.
const leaseSuffix = "-lease"

// recordKey is the batches bucket key of tenant's batch.
func recordKey(tenant, batch string) string { return bus.JobKey(tenant, batch) }

func checkRef(tenant, batch string) error {
	if err := schemas.ValidTenant(tenant); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := schemas.ValidBatchID(batch); err != nil {
		// Not an id any batch has: unknown, as for a well-formed id.
		return fmt.Errorf("%w: %s/%s", ErrNotFound, tenant, batch)
	}
	return nil
}

// Get returns tenant's batch id. Another tenant's batch is ErrNotFound.
func (s *Store) Get(ctx context.Context, tenant, id string) (schemas.BatchRecord, error) {
	rec, _, err := s.get(ctx, tenant, id)
	return rec, err
}

func (s *Store) get(ctx context.Context, tenant, id string) (schemas.BatchRecord, uint64, error) {
	if err := checkRef(tenant, id); err != nil {
		return schemas.BatchRecord{}, 0, err
	}
	rec, rev, err := s.recs.Get(ctx, recordKey(tenant, id))
	switch {
	case errors.Is(err, bus.ErrNotFound):
		return schemas.BatchRecord{}, 0, fmt.Errorf("%w: %s/%s", ErrNotFound, tenant, id)
	case err != nil:
		return schemas.BatchRecord{}, 0, fmt.Errorf("%w: read batch %s/%s: %w", ErrUnavailable, tenant, id, err)
	case foreign(tenant, id, rec, rev) != nil:
		// Not this batch's record, whatever is stored under its key
		// (owner.go): no batch, as for an id nobody used.
		return schemas.BatchRecord{}, 0, fmt.Errorf("%w: %s/%s", ErrNotFound, tenant, id)
	}
	return *rec, rev, nil
}

// List returns tenant's batches, newest first.
func (s *Store) List(ctx context.Context, tenant string) ([]schemas.BatchRecord, error) {
	if err := schemas.ValidTenant(tenant); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	lister, err := s.topo.Batches.ListKeysFiltered(ctx, recordKey(tenant, "*"))
	if err != nil {
		return nil, fmt.Errorf("%w: list batches: %w", ErrUnavailable, err)
	}
	defer func() { _ = lister.Stop() }()
	var out []schemas.BatchRecord
	seen := map[string]bool{}
	for key := range lister.Keys() {
		_, id, _ := strings.Cut(key, ".")
		if seen[id] || schemas.ValidBatchID(id) != nil { // leases, foreign keys
			continue
		}
		seen[id] = true
		rec, err := s.Get(ctx, tenant, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b schemas.BatchRecord) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return out, nil
}

// Cancel stops tenant's batch id: a queued batch (no job of it fed yet)
// is cancelled at once; a running one is marked cancelling, and its runner
// stops feeding, cancels its unfinished jobs and marks it cancelled once
// each has ended. Cancelling a batch being cancelled or cancelled changes
// nothing; an ended batch is ErrFinished.
func (s *Store) Cancel(ctx context.Context, tenant, id string) (schemas.BatchRecord, error) {
	if err := checkRef(tenant, id); err != nil {
		return schemas.BatchRecord{}, err
	}
	rec, err := s.recs.Update(ctx, recordKey(tenant, id), func(cur *schemas.BatchRecord) (*schemas.BatchRecord, error) {
		if cur == nil || foreign(tenant, id, cur, 0) != nil {
			return nil, fmt.Errorf("%w: %s/%s", ErrNotFound, tenant, id)
		}
		switch cur.State {
		case schemas.BatchCompleted:
			return nil, fmt.Errorf("%w: %s/%s completed", ErrFinished, tenant, id)
		case schemas.BatchCancelled, schemas.BatchCancelling:
			return nil, bus.ErrAbort
		}
		cancelRecord(cur, time.Now().UTC())
		return cur, nil
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrFinished) {
			return schemas.BatchRecord{}, err
		}
		return schemas.BatchRecord{}, fmt.Errorf("%w: cancel batch %s/%s: %w", ErrUnavailable, tenant, id, err)
	}
	if rec == nil { // already cancelled or cancelling
		return s.Get(ctx, tenant, id)
	}
	s.ended(ctx, *rec) // a queued batch is cancelled at once
	return *rec, nil
}

// ended queues the delivery of rec's end to its webhook, when it has
// ended and names one.
func (s *Store) ended(ctx context.Context, rec schemas.BatchRecord) {
	queueWebhook(ctx, s.topo, rec, slog.Default())
}

// queueWebhook queues the delivery of rec's end to its webhook, when it
// has ended and names one (internal/webhook; the delivery id dedups a
// second queueing).
func queueWebhook(ctx context.Context, topo *topology.Topology, rec schemas.BatchRecord, log *slog.Logger) {
	if err := webhook.Publish(ctx, topo.JS, topo.NS, webhook.BatchTask(rec)); err != nil {
		log.Error("queue the batch's webhook delivery; it is not made", "tenant", rec.Tenant, "batch", rec.ID, "err", err)
	}
}

// Wait blocks until tenant's batch id has ended and returns its record.
// onUpdate, if set, receives the record on each change meanwhile (from
// this goroutine), and first as it stands.
func (s *Store) Wait(ctx context.Context, tenant, id string, onUpdate func(schemas.BatchRecord)) (schemas.BatchRecord, error) {
	if err := checkRef(tenant, id); err != nil {
		return schemas.BatchRecord{}, err
	}
	w, err := s.topo.Batches.Watch(ctx, recordKey(tenant, id))
	if err != nil {
		return schemas.BatchRecord{}, fmt.Errorf("%w: watch batch %s/%s: %w", ErrUnavailable, tenant, id, err)
	}
	defer func() { _ = w.Stop() }()
	seen := false
	for {
		select {
		case <-ctx.Done():
			return schemas.BatchRecord{}, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return schemas.BatchRecord{}, fmt.Errorf("%w: batch watch closed: %w", ErrUnavailable, ctx.Err())
			}
			if e == nil { // the current value (if any) has been delivered
				if seen {
					continue
				}
				// None came: absent, or (rarely) written while the watch
				// started. The bucket itself says which.
				rec, err := s.Get(ctx, tenant, id)
				if err != nil {
					return schemas.BatchRecord{}, err
				}
				seen = true
				if onUpdate != nil {
					onUpdate(rec)
				}
				if schemas.BatchTerminal(rec.State) {
					return rec, nil
				}
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				return schemas.BatchRecord{}, fmt.Errorf("%w: %s/%s was deleted", ErrNotFound, tenant, id)
			}
			seen = true
			var rec schemas.BatchRecord
			if err := schemas.Decode(e.Value(), &rec); err != nil {
				return schemas.BatchRecord{}, fmt.Errorf("%w: read batch %s/%s: %w", ErrUnavailable, tenant, id, err)
			}
			if foreign(tenant, id, &rec, 0) != nil {
				return schemas.BatchRecord{}, fmt.Errorf("%w: %s/%s holds no record of that batch", ErrNotFound, tenant, id)
			}
			if onUpdate != nil {
				onUpdate(rec)
			}
			if schemas.BatchTerminal(rec.State) {
				return rec, nil
			}
		}
	}
}
