package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// View is how the delivery id of tenant, to url, stands: its record, or
// pending with no attempt when it has none yet. id "" (a job or batch not
// ended) is pending.
func View(ctx context.Context, kv jetstream.KeyValue, tenant, id, url string) (*schemas.WebhookView, error) {
	v := &schemas.WebhookView{URL: url, State: schemas.WebhookPending, Attempts: []schemas.WebhookAttempt{}}
	if id == "" || kv == nil {
		return v, nil
	}
	v.ID = id
	rec, _, err := bus.NewKV(kv, bus.MessageCodec[schemas.WebhookDelivery]()).Get(ctx, RecordKey(tenant, id))
	switch {
	case errors.Is(err, bus.ErrNotFound):
		return v, nil
	case err != nil:
		return nil, fmt.Errorf("webhook: read delivery %s/%s: %w", tenant, id, err)
	case rec.Tenant != tenant || rec.ID != id:
		return v, nil // not this delivery's record: shown as none
	}
	v.State, v.Attempts = rec.State, rec.Attempts
	if v.Attempts == nil {
		v.Attempts = []schemas.WebhookAttempt{}
	}
	return v, nil
}

// List is tenant's delivery records, newest first, at most limit.
func List(ctx context.Context, kv jetstream.KeyValue, tenant string, limit int) ([]schemas.WebhookDelivery, error) {
	if err := schemas.ValidTenant(tenant); err != nil {
		return nil, err
	}
	out := []schemas.WebhookDelivery{}
	lister, err := kv.ListKeysFiltered(ctx, tenant+".>")
	if err != nil {
		return nil, fmt.Errorf("webhook: list deliveries of %s: %w", tenant, err)
	}
	defer func() { _ = lister.Stop() }()
	recs := bus.NewKV(kv, bus.MessageCodec[schemas.WebhookDelivery]())
	for key := range lister.Keys() {
		rec, _, err := recs.Get(ctx, key)
		if err != nil || rec.Tenant != tenant || RecordKey(rec.Tenant, rec.ID) != key {
			continue // removed meanwhile, or not a delivery of tenant's
		}
		out = append(out, *rec)
	}
	slices.SortFunc(out, func(a, b schemas.WebhookDelivery) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
