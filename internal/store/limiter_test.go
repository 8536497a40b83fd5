package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

func newLimiter(t *testing.T) *store.Limiter {
	t.Helper()
	r := testkit.StartRedis(t)
	l := store.NewLimiter(r.Client(t), "test")
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l
}

func members(job string, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = store.Member(job, 0, 0, from+i)
	}
	return out
}

func admit(t *testing.T, l *store.Limiter, req store.AdmitRequest) store.Admission {
	t.Helper()
	a, err := l.Admit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestTokenBucket(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	q := schemas.TenantQuota{SamplesPerSecond: 20, Burst: 5}
	start := time.Now()
	a := admit(t, l, store.AdmitRequest{Tenant: "a", Job: "j", Quota: q, Members: members("j", 0, 8)})
	if a.Granted != 5 || a.Reason != store.Rate || a.RetryAfter <= 0 || a.RetryAfter > 50*time.Millisecond {
		t.Fatalf("first call: %+v, want 5 granted (the burst), rate, retry within 50ms", a)
	}
	// Keep asking: what is granted never exceeds burst + rate x elapsed.
	granted := a.Granted
	next := 100
	testkit.Eventually(t, 10*time.Second, func() bool {
		a := admit(t, l, store.AdmitRequest{Tenant: "a", Job: "j", Quota: q, Members: members("j", next, 3)})
		granted += a.Granted
		next += 3
		if limit := 5 + int(20*time.Since(start).Seconds()) + 1; granted > limit {
			t.Fatalf("granted %d after %v, more than burst + rate allows (%d)", granted, time.Since(start), limit)
		}
		return granted >= 15
	}, "the bucket refills")
	// Another tenant has a bucket of its own.
	if a := admit(t, l, store.AdmitRequest{Tenant: "b", Job: "j", Quota: q, Members: members("j", 0, 5)}); a.Granted != 5 {
		t.Fatalf("tenant b: %+v", a)
	}
}

func TestInflightCapAndExpiry(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	ctx := context.Background()
	q := schemas.TenantQuota{MaxInflightSamples: 2}
	a := admit(t, l, store.AdmitRequest{Tenant: "a", Job: "j", Quota: q, Members: members("j", 0, 3), Lifetime: time.Minute})
	if a.Granted != 2 || a.Reason != store.TenantInflight {
		t.Fatalf("%+v, want 2 granted, tenant in-flight cap", a)
	}
	// An index published again holds its one place.
	if a := admit(t, l, store.AdmitRequest{Tenant: "a", Job: "j", Quota: q, Members: members("j", 0, 1)}); a.Granted != 1 {
		t.Fatalf("re-published index: %+v", a)
	}
	if err := l.Release(ctx, "a", members("j", 0, 1)); err != nil {
		t.Fatal(err)
	}
	if a := admit(t, l, store.AdmitRequest{Tenant: "a", Job: "j", Quota: q, Members: members("j", 2, 2), Lifetime: 50 * time.Millisecond}); a.Granted != 1 {
		t.Fatalf("after a release: %+v, want 1", a)
	}
	if n, err := l.InFlight(ctx, "a"); err != nil || n != 2 {
		t.Fatalf("in flight %d (%v), want 2", n, err)
	}
	// The 50ms entry lapses (its coordinator died): its place comes back.
	testkit.Eventually(t, 5*time.Second, func() bool {
		n, err := l.InFlight(ctx, "a")
		return err == nil && n == 1
	}, "the short-lived entry expires")
	if a := admit(t, l, store.AdmitRequest{Tenant: "a", Job: "j", Quota: q, Members: members("j", 5, 1)}); a.Granted != 1 {
		t.Fatalf("after expiry: %+v", a)
	}
	// Refresh keeps held entries and does not bring released ones back.
	if n, err := l.Refresh(ctx, "a", members("j", 0, 8), time.Minute); err != nil || n != 2 {
		t.Fatalf("refresh held %d (%v), want 2", n, err)
	}
}

func TestFairShare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fleet := schemas.TenantQuota{MaxInflightSamples: 6}
	tests := []struct {
		name         string
		wa, wb       float64
		wantA, wantB int // in flight once both want more
	}{
		{"equal weights", 0, 0, 3, 3},
		{"a weighs twice b", 2, 1, 4, 2},
		{"b weighs twice a", 1, 2, 2, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLimiter(t)
			qa, qb := schemas.TenantQuota{Weight: tt.wa}, schemas.TenantQuota{Weight: tt.wb}
			ask := func(tenant string, q schemas.TenantQuota, from, n int) store.Admission {
				return admit(t, l, store.AdmitRequest{Tenant: tenant, Job: "j", Quota: q, Fleet: fleet, Members: members("j", from, n), Lifetime: time.Minute, Wait: 5 * time.Second})
			}
			// Alone, a takes the whole fleet.
			if a := ask("a", qa, 0, 6); a.Granted != 6 {
				t.Fatalf("a alone: %+v", a)
			}
			// b finds it full and waits.
			if a := ask("b", qb, 0, 6); a.Granted != 0 || a.Reason != store.FleetFull {
				t.Fatalf("b on a full fleet: %+v", a)
			}
			// Every answer of a frees a place; while b waits, a refills
			// only up to its share, and b takes the rest.
			nextA, nextB := 6, 0
			for i := range 6 {
				if err := l.Release(ctx, "a", members("j", i, 1)); err != nil {
					t.Fatal(err)
				}
				nextA++
				ask("a", qa, nextA, 1)
				nextB += ask("b", qb, nextB, 1).Granted
			}
			na, _ := l.InFlight(ctx, "a")
			nb, _ := l.InFlight(ctx, "b")
			if na != tt.wantA || nb != tt.wantB {
				t.Fatalf("in flight a=%d b=%d, want %d and %d", na, nb, tt.wantA, tt.wantB)
			}
			if all, _ := l.InFlight(ctx, ""); all > 6 {
				t.Fatalf("fleet in flight %d over its capacity 6", all)
			}
		})
	}
}

func TestPriorityWithinTenant(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	ctx := context.Background()
	q := schemas.TenantQuota{MaxInflightSamples: 1}
	ask := func(job string, prio, index int) store.Admission {
		return admit(t, l, store.AdmitRequest{Tenant: "a", Job: job, Priority: prio, Quota: q, Members: members(job, index, 1), Wait: 5 * time.Second})
	}
	if a := ask("lo", 0, 0); a.Granted != 1 {
		t.Fatalf("lo: %+v", a)
	}
	if a := ask("hi", 5, 0); a.Granted != 0 || a.Reason != store.TenantInflight {
		t.Fatalf("hi behind the cap: %+v", a)
	}
	if err := l.Release(ctx, "a", members("lo", 0, 1)); err != nil {
		t.Fatal(err)
	}
	// lo's next request yields to hi, which waits.
	if a := ask("lo", 0, 1); a.Granted != 0 || a.Reason != store.Priority {
		t.Fatalf("lo while hi waits: %+v, want refused for priority", a)
	}
	if a := ask("hi", 5, 0); a.Granted != 1 {
		t.Fatalf("hi: %+v", a)
	}
	// Another tenant's priorities are not a's.
	if a := admit(t, l, store.AdmitRequest{Tenant: "b", Job: "x", Quota: q, Members: members("x", 0, 1)}); a.Granted != 1 {
		t.Fatalf("tenant b: %+v", a)
	}
}

func TestRunningJobs(t *testing.T) {
	t.Parallel()
	l := newLimiter(t)
	ctx := context.Background()
	acquire := func(job string, life time.Duration) bool {
		ok, _, err := l.AcquireRun(ctx, "a", job, 2, life)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !acquire("j1", time.Minute) || !acquire("j2", 50*time.Millisecond) {
		t.Fatal("two slots refused")
	}
	if acquire("j3", time.Minute) {
		t.Fatal("a third job got a slot over the cap of 2")
	}
	if !acquire("j1", time.Minute) {
		t.Fatal("a held slot was not kept")
	}
	// j2's coordinator died: its slot lapses.
	testkit.Eventually(t, 5*time.Second, func() bool { return acquire("j3", time.Minute) }, "j2's slot lapses")
	if err := l.ReleaseRun(ctx, "a", "j1"); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Running(ctx, "a"); err != nil || n != 1 {
		t.Fatalf("running %d (%v), want 1", n, err)
	}
	// Many coordinators at once: never more than the cap.
	errs := make(chan error, 20)
	oks := make(chan bool, 20)
	for i := range 20 {
		go func() {
			ok, _, err := l.AcquireRun(ctx, "b", fmt.Sprint("job", i), 3, time.Minute)
			errs <- err
			oks <- ok
		}()
	}
	taken := 0
	for range 20 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if <-oks {
			taken++
		}
	}
	if taken != 3 {
		t.Fatalf("%d slots taken at once, want the cap 3", taken)
	}
}
