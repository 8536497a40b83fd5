package quota_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/quota"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestStore: records are stored, validated and listed; before Start each
// read asks the bucket, after it the watch-fed cache answers and follows
// every change.
func TestStore(t *testing.T) {
	t.Parallel()
	_, topo := testkit.StartTopology(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := quota.New(topo)

	if q, err := s.Get(ctx, "acme"); err != nil || q.MaxRunningJobs != 0 || q.EffectiveWeight() != 1 {
		t.Fatalf("unset quota: %+v, %v", q, err)
	}
	if _, err := s.Set(ctx, schemas.TenantQuota{Tenant: "acme", MaxRunningJobs: -1}); !errors.Is(err, quota.ErrInvalid) {
		t.Fatalf("negative limit: %v, want ErrInvalid", err)
	}
	if _, err := s.Set(ctx, schemas.TenantQuota{Tenant: "acme", MaxRunningJobs: 2, Weight: 3}); err != nil {
		t.Fatal(err)
	}
	if q, err := s.Get(ctx, "acme"); err != nil || q.MaxRunningJobs != 2 || q.Weight != 3 || q.UpdatedAt.IsZero() {
		t.Fatalf("read back (no cache): %+v, %v", q, err)
	}
	if _, ok := s.Cached("acme"); ok {
		t.Fatal("cache live before Start")
	}

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := s.Start(wctx); err != nil {
		t.Fatal(err)
	}
	if q, ok := s.Cached("acme"); !ok || q.MaxRunningJobs != 2 {
		t.Fatalf("cache after Start: %+v %v", q, ok)
	}
	// A change made elsewhere (another process's store) reaches the cache.
	other := quota.New(topo)
	changed := s.Changed()
	if _, err := other.Set(ctx, schemas.TenantQuota{MaxInflightSamples: 8}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no change seen")
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		f, _ := s.Fleet(ctx)
		return f.MaxInflightSamples == 8
	}, "the fleet record reaches the cache")
	all, err := s.List(ctx)
	if err != nil || len(all) != 2 || all[0].Tenant != "" || all[1].Tenant != "acme" {
		t.Fatalf("list: %+v, %v", all, err)
	}
	if err := other.Delete(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		q, _ := s.Cached("acme")
		return q.MaxRunningJobs == 0
	}, "the deletion reaches the cache")
	stop()
}
