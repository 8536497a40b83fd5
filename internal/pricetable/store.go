package pricetable

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/schemas"
)

// Store errors.
var (
	// ErrInvalid: a price record that does not validate.
	ErrInvalid = errors.New("pricing: invalid price")
	// ErrNoBucket: no price table bucket (a topology without one).
	ErrNoBucket = errors.New("pricing: no price table")
	// ErrNotFound: no record for the model.
	ErrNotFound = errors.New("pricing: no price set")
)

// DefaultKey is the bucket key of the default record.
const DefaultKey = "default"

// Key is the bucket key of model's record ("": the default record's):
// "model." and the model as one safe token (bus.SafeKey), so any model
// name gives a valid key and none is the default's.
func Key(model string) string {
	if model == "" {
		return DefaultKey
	}
	return "model." + bus.SafeKey(model)
}

// Set stores p under its model's key, replacing the record before: it
// fills the header and UpdatedAt, validates, and returns what it stored.
func Set(ctx context.Context, kv jetstream.KeyValue, p schemas.ModelPrice) (schemas.ModelPrice, error) {
	if kv == nil {
		return p, ErrNoBucket
	}
	p.Header = schemas.NewHeader(schemas.KindModelPrice)
	p.UpdatedAt = time.Now().UTC()
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	data, err := schemas.Encode(&p)
	if err != nil {
		return p, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := kv.Put(ctx, Key(p.Model), data); err != nil {
		return p, fmt.Errorf("pricing: store the price of %s: %w", p.Name(), err)
	}
	return p, nil
}

// Unset removes model's record ("": the default record): its samples are
// unpriced from then on. ErrNotFound when there is none.
func Unset(ctx context.Context, kv jetstream.KeyValue, model string) error {
	if kv == nil {
		return ErrNoBucket
	}
	if _, err := Get(ctx, kv, model); err != nil {
		return err
	}
	if err := kv.Delete(ctx, Key(model)); err != nil {
		return fmt.Errorf("pricing: remove the price of %s: %w", pricing.Name(model), err)
	}
	return nil
}

// Get reads model's record ("": the default record) from the bucket;
// ErrNotFound when there is none.
func Get(ctx context.Context, kv jetstream.KeyValue, model string) (schemas.ModelPrice, error) {
	if kv == nil {
		return schemas.ModelPrice{}, ErrNoBucket
	}
	e, err := kv.Get(ctx, Key(model))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return schemas.ModelPrice{}, fmt.Errorf("%w for %s", ErrNotFound, pricing.Name(model))
	}
	if err != nil {
		return schemas.ModelPrice{}, fmt.Errorf("pricing: read the price of %s: %w", pricing.Name(model), err)
	}
	var p schemas.ModelPrice
	if err := schemas.Decode(e.Value(), &p); err != nil {
		return schemas.ModelPrice{}, fmt.Errorf("pricing: record %s: %w", e.Key(), err)
	}
	// A hashed key could in principle be another name's.
	if p.Model != model || p.Default != (model == "") {
		return schemas.ModelPrice{}, fmt.Errorf("%w for %s (key %s holds %s)", ErrNotFound, pricing.Name(model), e.Key(), p.Name())
	}
	return p, nil
}

// Load reads the whole table from the bucket (not a cache: what was just
// written). Unreadable records are left out and named in the error
// returned with the rest.
func Load(ctx context.Context, kv jetstream.KeyValue) (pricing.Table, error) {
	if kv == nil {
		return pricing.Table{}, nil
	}
	recs, err := bus.ReadAll(ctx, kv, func(e jetstream.KeyValueEntry) (schemas.ModelPrice, error) {
		var p schemas.ModelPrice
		err := schemas.Decode(e.Value(), &p)
		return p, err
	})
	if err != nil {
		err = fmt.Errorf("pricing: %w", err)
	}
	return pricing.NewTable(recs), err
}

// Cache is the price table kept in memory through the bucket's watch
// (bus.Mirror): Table costs no round trip, and a change any process writes
// applies within a second. Safe for concurrent use.
type Cache struct {
	kv     jetstream.KeyValue
	mirror *bus.Mirror[schemas.ModelPrice]

	mu   sync.Mutex
	at   <-chan struct{} // the mirror's Changed when t was built (nil: never)
	t    pricing.Table
	live bool
}

// NewCache returns the cache of bucket kv (nil: an empty table).
func NewCache(kv jetstream.KeyValue) *Cache {
	return &Cache{kv: kv, mirror: bus.NewMirror(kv, func(data []byte) (schemas.ModelPrice, error) {
		var p schemas.ModelPrice
		err := schemas.Decode(data, &p)
		return p, err
	})}
}

// Start runs the watch until ctx ends (the cache owns its goroutine; Wait
// waits for it); it returns once the table is in memory.
func (c *Cache) Start(ctx context.Context) error {
	if err := c.mirror.Start(ctx); err != nil {
		return fmt.Errorf("pricing: %w", err)
	}
	return nil
}

// Wait waits for the watch Start began to end.
func (c *Cache) Wait() { c.mirror.Wait() }

// Table returns the table as the watch last saw it, and whether the cache
// is live (started and watching); the empty table when it is not.
func (c *Cache) Table() (pricing.Table, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at != nil {
		select {
		case <-c.at:
		default:
			return c.t, c.live
		}
	}
	ch := c.mirror.Changed()
	all, live := c.mirror.All()
	recs := make([]schemas.ModelPrice, 0, len(all))
	for _, p := range all {
		recs = append(recs, p)
	}
	c.at, c.t, c.live = ch, pricing.NewTable(recs), live
	return c.t, c.live
}

// Current is the table: the cache's while it is live, else read from the
// bucket.
func (c *Cache) Current(ctx context.Context) (pricing.Table, error) {
	if t, live := c.Table(); live {
		return t, nil
	}
	return Load(ctx, c.kv)
}
