package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/schemas"
)

// Codec turns a bucket's values into bytes and back.
type Codec[T any] struct {
	Encode func(*T) ([]byte, error)
	Decode func([]byte, *T) error
}

// JSONCodec stores plain JSON: for values only one role reads and writes
// (the judge's session counters), which have no schemas kind.
func JSONCodec[T any]() Codec[T] {
	return Codec[T]{
		Encode: func(v *T) ([]byte, error) { return json.Marshal(v) },
		Decode: func(data []byte, v *T) error { return json.Unmarshal(data, v) },
	}
}

// MessageCodec stores schemas messages: validated before every write,
// strictly decoded on every read.
func MessageCodec[T any, P interface {
	*T
	schemas.Message
}]() Codec[T] {
	return Codec[T]{
		Encode: func(v *T) ([]byte, error) { return schemas.Encode(P(v)) },
		Decode: func(data []byte, v *T) error { return schemas.Decode(data, P(v)) },
	}
}

// KV is a bucket of values of one type: reads with the revision, writes
// conditional on a revision, and the one compare-and-set loop (Update)
// every limit or record shared across processes is built on. It holds no
// state of its own; build one wherever a bucket is at hand.
type KV[T any] struct {
	kv    jetstream.KeyValue
	codec Codec[T]
}

// NewKV returns a typed view of kv.
func NewKV[T any](kv jetstream.KeyValue, codec Codec[T]) *KV[T] {
	return &KV[T]{kv: kv, codec: codec}
}

// Get returns key's value and revision. An absent or deleted key is
// ErrNotFound. A value the codec cannot read is ErrBadValue, returned with
// its revision, so a caller may overwrite it.
func (k *KV[T]) Get(ctx context.Context, key string) (*T, uint64, error) {
	e, err := k.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("bus: read %s: %w", key, err)
	}
	v := new(T)
	if err := k.codec.Decode(e.Value(), v); err != nil {
		return nil, e.Revision(), fmt.Errorf("%w: %s at revision %d: %w", ErrBadValue, key, e.Revision(), err)
	}
	return v, e.Revision(), nil
}

// Create writes v to key if the key is absent (or deleted) and returns the
// new revision; ErrConflict if it is present.
func (k *KV[T]) Create(ctx context.Context, key string, v *T) (uint64, error) {
	return k.PutAt(ctx, key, v, 0)
}

// PutAt writes v to key if the key is still at revision rev (0: absent or
// deleted) and returns the new revision; ErrConflict if another write got
// in between.
func (k *KV[T]) PutAt(ctx context.Context, key string, v *T, rev uint64) (uint64, error) {
	data, err := k.codec.Encode(v)
	if err != nil {
		return 0, fmt.Errorf("bus: encode %s: %w", key, err)
	}
	var next uint64
	if rev == 0 {
		next, err = k.kv.Create(ctx, key, data)
	} else {
		next, err = k.kv.Update(ctx, key, data, rev)
	}
	if conflict(err) {
		return 0, fmt.Errorf("%w: %s since revision %d", ErrConflict, key, rev)
	}
	if err != nil {
		return 0, fmt.Errorf("bus: write %s: %w", key, err)
	}
	return next, nil
}

// conflict is the one test for a lost compare-and-set: Create found the key
// present, or Update found another revision. (nats.go maps both server
// codes for it, 10071 and, on replicated streams, 10164, to these two.)
func conflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// Update applies mutate to key's current value (nil when the key is
// absent) and writes what it returns, unless another writer got in
// between: then it reads again and retries, until ctx ends. mutate may
// change cur in place and return it; it runs once per attempt, so it must
// not count on running once. It may return ErrAbort to write nothing
// (Update returns nil, nil), or any other error, returned as it is.
// Update returns the value it wrote.
func (k *KV[T]) Update(ctx context.Context, key string, mutate func(cur *T) (*T, error)) (*T, error) {
	for {
		cur, rev, err := k.Get(ctx, key)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		next, err := mutate(cur)
		if errors.Is(err, ErrAbort) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if _, err := k.PutAt(ctx, key, next, rev); !errors.Is(err, ErrConflict) {
			if err != nil {
				return nil, err
			}
			return next, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// ReadAll reads every record of kv now (not a watch), each through
// decode, which also checks the record against its key. A record removed
// meanwhile is skipped; one that cannot be read or decoded is left out
// and named in the error returned with the rest.
func ReadAll[T any](ctx context.Context, kv jetstream.KeyValue, decode func(jetstream.KeyValueEntry) (T, error)) ([]T, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("bus: list %s: %w", kv.Bucket(), err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var (
		out  []T
		errs []error
	)
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bus: read %s %s: %w", kv.Bucket(), k, err))
			continue
		}
		v, err := decode(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("bus: record %s %s: %w", kv.Bucket(), k, err))
			continue
		}
		out = append(out, v)
	}
	return out, errors.Join(errs...)
}
