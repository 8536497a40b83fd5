package judge

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// errAbort from a casUpdate mutation ends the update without writing and
// without an error.
var errAbort = errors.New("judge: no update")

// casUpdate applies mutate to key's value (nil when the key is absent)
// and writes the result only if nobody wrote the key in between, retrying
// on conflicts: the building block of every limit that must hold across
// concurrent calls and judge replicas. mutate may return errAbort to write
// nothing, or any other error to fail.
func casUpdate(ctx context.Context, kv jetstream.KeyValue, key string, mutate func(cur []byte) ([]byte, error)) error {
	for {
		var cur []byte
		var rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("judge: read %s: %w", key, err)
		default:
			cur, rev = e.Value(), e.Revision()
		}
		next, err := mutate(cur)
		if errors.Is(err, errAbort) {
			return nil
		}
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = kv.Create(ctx, key, next)
		} else {
			_, err = kv.Update(ctx, key, next, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("judge: write %s: %w", key, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
