package store_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestSampleKey: the coordinators of a fleet, started at once on one
// Redis, all read the same random key of SampleKeyBytes, made once
// (HSETNX) under the store's prefix; another prefix has its own; a key
// that is not what this build wrote is refused, never replaced.
func TestSampleKey(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, _ *store.Store, r *testkit.Redis) {
		ctx := context.Background()
		keys := make([][]byte, 8)
		var wg sync.WaitGroup
		for i := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := store.New(r.Client(t), store.Config{})
				if err != nil {
					t.Error(err)
					return
				}
				if keys[i], err = s.SampleKey(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		for i, k := range keys {
			if len(k) != store.SampleKeyBytes || !bytes.Equal(k, keys[0]) {
				t.Fatalf("coordinator %d read key %x, coordinator 0 %x: want one key of %d bytes", i, k, keys[0], store.SampleKeyBytes)
			}
		}
		if bytes.Equal(keys[0], make([]byte, store.SampleKeyBytes)) {
			t.Error("the key is all zero bytes")
		}
		other, err := store.New(r.Client(t), store.Config{KeyPrefix: "run-1"})
		if err != nil {
			t.Fatal(err)
		}
		if k, err := other.SampleKey(ctx); err != nil || bytes.Equal(k, keys[0]) {
			t.Errorf("another namespace's key: %x, %v; want its own", k, err)
		}
		if err := r.Client(t).HSet(ctx, "maker:secrets", "sample_key", "c2hvcnQ=").Err(); err != nil {
			t.Fatal(err)
		}
		def, err := store.New(r.Client(t), store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := def.SampleKey(ctx); !errors.Is(err, store.ErrSecret) {
			t.Errorf("a 5-byte key: %v, want ErrSecret", err)
		}
		if v, _ := r.Client(t).HGet(ctx, "maker:secrets", "sample_key").Result(); v != "c2hvcnQ=" {
			t.Errorf("the bad key was replaced by %q", v)
		}
	})
}
