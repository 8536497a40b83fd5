package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/lease"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	tenant = "acme"
	job    = "j1"
	ttl    = time.Minute // long: nothing in these tests expires unless a clock says so
)

// bucket returns the lease bucket of a fresh in-process server.
func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	_, topo := testkit.StartTopology(t)
	return topo.Leases
}

func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// manager returns a manager for owner; with skew != 0 its clock runs that
// far ahead of the real one.
func manager(t *testing.T, kv jetstream.KeyValue, owner string, skew time.Duration) *lease.Manager {
	t.Helper()
	m, err := lease.NewManager(kv, owner, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if skew != 0 {
		lease.SetClock(m, func() time.Time { return time.Now().Add(skew) })
	}
	return m
}

// current reads the lease on tenant/job; nil if there is none.
func current(t *testing.T, kv jetstream.KeyValue) *schemas.Lease {
	t.Helper()
	l, err := lease.Read(opCtx(t), kv, tenant, job)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func acquire(t *testing.T, m *lease.Manager) *lease.Lease {
	t.Helper()
	l, err := m.Acquire(opCtx(t), tenant, job)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return l
}

func TestNewManagerValidates(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	tests := []struct {
		name  string
		kv    jetstream.KeyValue
		owner string
		ttl   time.Duration
		ok    bool
	}{
		{"ok", kv, "c1", 100 * time.Millisecond, true},
		{"no bucket", nil, "c1", time.Second, false},
		{"no owner", kv, "", time.Second, false},
		{"ttl too short", kv, "c1", 99 * time.Millisecond, false},
		{"ttl zero", kv, "c1", 0, false},
	}
	for _, tt := range tests {
		m, err := lease.NewManager(tt.kv, tt.owner, tt.ttl)
		if (err == nil) != tt.ok || (m != nil) != tt.ok {
			t.Errorf("%s: NewManager = %v, %v; want ok %v", tt.name, m, err, tt.ok)
		}
		if tt.ok && m.TTL() != tt.ttl {
			t.Errorf("%s: TTL = %v, want %v", tt.name, m.TTL(), tt.ttl)
		}
	}
}

// TestAcquireFree: a free job is taken under token 1, for one TTL, and
// the bucket holds exactly that lease.
func TestAcquireFree(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	if l := current(t, kv); l != nil {
		t.Fatalf("Read of a job never leased = %+v, want nil", l)
	}
	before := time.Now()
	l := acquire(t, manager(t, kv, "c1", 0))
	if l.Token != 1 || l.Owner != "c1" || l.Tenant != tenant || l.JobID != job {
		t.Errorf("lease %+v, want token 1 owned by c1 on %s/%s", l.Lease, tenant, job)
	}
	if l.ExpiresAt.Before(before.Add(ttl)) || l.ExpiresAt.After(time.Now().Add(ttl)) {
		t.Errorf("expires at %v, want one TTL (%v) from now", l.ExpiresAt, ttl)
	}
	got := current(t, kv)
	if got == nil || got.Token != 1 || got.Owner != "c1" || !got.ExpiresAt.Equal(l.ExpiresAt) {
		t.Errorf("bucket holds %+v, want the granted lease %+v", got, l.Lease)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("stored lease does not validate: %v", err)
	}
}

// TestAcquireHeld: a live lease of another owner is refused with ErrHeld,
// naming the holder, and is left as it was.
func TestAcquireHeld(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	l := acquire(t, manager(t, kv, "c1", 0))
	_, err := manager(t, kv, "c2", 0).Acquire(opCtx(t), tenant, job)
	if !errors.Is(err, lease.ErrHeld) || !strings.Contains(err.Error(), "c1") {
		t.Errorf("Acquire of a held lease = %v, want ErrHeld naming c1", err)
	}
	if got := current(t, kv); got.Owner != "c1" || got.Token != 1 || !got.ExpiresAt.Equal(l.ExpiresAt) {
		t.Errorf("a refused Acquire changed the lease to %+v", got)
	}
}

// TestExpiredLeaseTakenOver: once the lease has expired (by the taker's
// clock) another coordinator takes it under token + 1; from then on the
// old holder's Renew is ErrLost, and its Release changes nothing.
func TestExpiredLeaseTakenOver(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	a := manager(t, kv, "c1", 0)
	old := acquire(t, a)
	if err := a.Renew(opCtx(t), old); err != nil { // a renewed lease is taken over the same way
		t.Fatal(err)
	}

	b := manager(t, kv, "c2", ttl+time.Second)
	nl := acquire(t, b)
	if nl.Token != old.Token+1 || nl.Owner != "c2" {
		t.Fatalf("takeover lease %+v, want token %d owned by c2", nl.Lease, old.Token+1)
	}

	if err := a.Renew(opCtx(t), old); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Renew by the old holder = %v, want ErrLost", err)
	}
	if err := a.Release(opCtx(t), old, 0); err != nil {
		t.Errorf("Release of a lost lease = %v, want nil", err)
	}
	got := current(t, kv)
	if got == nil || got.Owner != "c2" || got.Token != nl.Token || !got.ExpiresAt.Equal(nl.ExpiresAt) {
		t.Errorf("old holder's Release changed the new lease to %+v, want %+v", got, nl.Lease)
	}
	// The new holder is unaffected.
	if err := b.Renew(opCtx(t), nl); err != nil {
		t.Errorf("Renew by the new holder: %v", err)
	}

	// A third takeover raises the token again.
	c := manager(t, kv, "c3", 3*ttl)
	if l := acquire(t, c); l.Token != nl.Token+1 {
		t.Errorf("second takeover token %d, want %d", l.Token, nl.Token+1)
	}
}

// TestAcquireOwnName: a lease in the manager's own name (a restart of the
// same coordinator) is taken over at once, unexpired, under a new token,
// and fences the earlier incarnation's lease.
func TestAcquireOwnName(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	first := acquire(t, manager(t, kv, "c1", 0))
	restarted := manager(t, kv, "c1", 0)
	second := acquire(t, restarted)
	if second.Token != first.Token+1 || second.Owner != "c1" {
		t.Errorf("own-name takeover %+v, want token %d", second.Lease, first.Token+1)
	}
	if err := restarted.Renew(opCtx(t), first); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Renew of the earlier incarnation's lease = %v, want ErrLost", err)
	}
	if err := restarted.Renew(opCtx(t), second); err != nil {
		t.Errorf("Renew of the current lease: %v", err)
	}
}

// TestRenew: Renew moves the expiry one TTL past the renewer's now and
// keeps owner and token.
func TestRenew(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	var mu sync.Mutex
	now := time.Now()
	m := manager(t, kv, "c1", 0)
	lease.SetClock(m, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	l := acquire(t, m)
	if !l.ExpiresAt.Equal(now.Add(ttl).UTC()) {
		t.Fatalf("expires at %v, want %v", l.ExpiresAt, now.Add(ttl))
	}
	for i := 1; i <= 3; i++ {
		mu.Lock()
		now = now.Add(ttl / 2)
		want := now.Add(ttl).UTC()
		mu.Unlock()
		if err := m.Renew(opCtx(t), l); err != nil {
			t.Fatalf("Renew %d: %v", i, err)
		}
		got := current(t, kv)
		if !l.ExpiresAt.Equal(want) || !got.ExpiresAt.Equal(want) || got.Token != 1 || got.Owner != "c1" || l.Token != 1 {
			t.Errorf("after Renew %d: held %+v, stored %+v; want token 1, c1, expiring %v", i, l.Lease, got, want)
		}
	}
}

// TestRenewAfterLostReply: when a renewal landed but its reply was lost,
// the holder still has the older revision; its next Renew must recognise
// the lease as its own and succeed. A lease taken over meanwhile must not.
func TestRenewAfterLostReply(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	m := manager(t, kv, "c1", 0)
	l := acquire(t, m)
	stale := *l // the holder's view before the renewal whose reply is lost
	if err := m.Renew(opCtx(t), l); err != nil {
		t.Fatal(err)
	}
	if err := m.Renew(opCtx(t), &stale); err != nil {
		t.Fatalf("Renew after a renewal whose reply was lost = %v, want nil", err)
	}
	if stale.Token != 1 {
		t.Errorf("token changed to %d", stale.Token)
	}
	// The recovered lease goes on renewing normally.
	if err := m.Renew(opCtx(t), &stale); err != nil {
		t.Errorf("Renew after the recovery: %v", err)
	}

	// But once another owner took over, a stale view is lost for good.
	stale2 := stale
	other := manager(t, kv, "c2", 2*ttl)
	if _, err := other.Acquire(opCtx(t), tenant, job); err != nil {
		t.Fatal(err)
	}
	if err := m.Renew(opCtx(t), &stale2); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Renew after a takeover = %v, want ErrLost", err)
	}
	if got := current(t, kv); got.Owner != "c2" || got.Token != 2 {
		t.Errorf("lease is %+v, want c2's token 2", got)
	}
}

// TestRelease: a lease released at once is free for any coordinator (token
// + 1); one released after a delay stays held by it until the delay ends.
func TestRelease(t *testing.T) {
	t.Parallel()
	t.Run("now", func(t *testing.T) {
		t.Parallel()
		kv := bucket(t)
		a := manager(t, kv, "c1", 0)
		l := acquire(t, a)
		if err := a.Release(opCtx(t), l, 0); err != nil {
			t.Fatal(err)
		}
		if got := current(t, kv); got == nil || got.ExpiresAt.After(time.Now()) || got.Token != 1 {
			t.Errorf("released lease %+v, want token 1 expiring in the past", got)
		}
		if nl := acquire(t, manager(t, kv, "c2", 0)); nl.Token != 2 || nl.Owner != "c2" {
			t.Errorf("lease after release %+v, want c2's token 2", nl.Lease)
		}
	})
	t.Run("after delay", func(t *testing.T) {
		t.Parallel()
		kv := bucket(t)
		a := manager(t, kv, "c1", 0)
		l := acquire(t, a)
		const delay = 10 * time.Minute // past the TTL, so only the delay can explain a refusal
		if err := a.Release(opCtx(t), l, delay); err != nil {
			t.Fatal(err)
		}
		early := manager(t, kv, "c2", ttl+time.Second)
		if _, err := early.Acquire(opCtx(t), tenant, job); !errors.Is(err, lease.ErrHeld) {
			t.Errorf("Acquire within the release delay = %v, want ErrHeld", err)
		}
		late := manager(t, kv, "c2", delay+time.Second)
		if nl := acquire(t, late); nl.Token != 2 {
			t.Errorf("lease after the delay %+v, want token 2", nl.Lease)
		}
	})
}

// TestReleaseDelayHoldsOwner: the coordinator uses Release(after) to keep
// a failed job from being retried before its retry delay, by anyone. The
// releasing coordinator's own Acquire must wait too.
func TestReleaseDelayHoldsOwner(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	a := manager(t, kv, "c1", 0)
	l := acquire(t, a)
	if err := a.Release(opCtx(t), l, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if nl, err := a.Acquire(opCtx(t), tenant, job); !errors.Is(err, lease.ErrHeld) {
		t.Errorf("Acquire by the releasing owner within the delay = %+v, %v; want ErrHeld", nl, err)
	}
}

// TestTokensOnlyGrow: through any sequence of releases and takeovers, by
// other owners or the same one, every new lease has a token above every
// earlier one, and the bucket always holds the latest.
func TestTokensOnlyGrow(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	owners := []string{"c1", "c2", "c1", "c1", "c3", "c2"}
	var last int64
	for i, owner := range owners {
		m := manager(t, kv, owner, 0)
		l := acquire(t, m)
		if l.Token != last+1 {
			t.Fatalf("lease %d (%s) has token %d, want %d", i, owner, l.Token, last+1)
		}
		last = l.Token
		if i%2 == 0 {
			if err := m.Renew(opCtx(t), l); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Release(opCtx(t), l, 0); err != nil {
			t.Fatal(err)
		}
		if got := current(t, kv); got == nil || got.Token != last || got.Owner != owner {
			t.Fatalf("after release %d the bucket holds %+v, want %s's token %d", i, got, owner, last)
		}
	}
}

// TestConcurrentAcquire: of many coordinators racing for one job, exactly
// one gets it, for a free job and for an expired one alike; the losers
// learn it is held.
func TestConcurrentAcquire(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		prior     bool // an expired lease of token 1 is there
		wantToken int64
	}{
		{"free", false, 1},
		{"expired", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kv := bucket(t)
			if tc.prior {
				acquire(t, manager(t, kv, "old", 0))
			}
			const n = 8
			var wg sync.WaitGroup
			leases := make([]*lease.Lease, n)
			errs := make([]error, n)
			start := make(chan struct{})
			for i := range n {
				m := manager(t, kv, fmt.Sprintf("c%d", i), 2*ttl)
				wg.Go(func() {
					<-start
					leases[i], errs[i] = m.Acquire(opCtx(t), tenant, job)
				})
			}
			close(start)
			wg.Wait()
			winner := -1
			for i := range n {
				switch {
				case errs[i] == nil:
					if winner >= 0 {
						t.Errorf("both c%d and c%d acquired the lease", winner, i)
					}
					winner = i
				case errors.Is(errs[i], lease.ErrHeld), tc.prior && errors.Is(errs[i], lease.ErrLost):
					// Lost the race. (A lost race to take over an expired
					// lease is reported as ErrLost today; see the report.)
				default:
					t.Errorf("c%d: Acquire = %v, want ErrHeld", i, errs[i])
				}
			}
			if winner < 0 {
				t.Fatal("no coordinator acquired the lease")
			}
			got := current(t, kv)
			if w := leases[winner]; w.Token != tc.wantToken || got.Owner != w.Owner || got.Token != w.Token {
				t.Errorf("winner holds %+v, bucket holds %+v; want token %d held by the winner", w.Lease, got, tc.wantToken)
			}
		})
	}
}

// TestUnreadableLease: a value that does not decode cannot fence anything;
// Acquire replaces it under a token above its revision, and Read says it is
// unreadable.
func TestUnreadableLease(t *testing.T) {
	t.Parallel()
	kv := bucket(t)
	rev, err := kv.Put(opCtx(t), bus.JobKey(tenant, job), []byte("not a lease"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Read(opCtx(t), kv, tenant, job); err == nil {
		t.Error("Read of an unreadable lease = nil error")
	}
	l := acquire(t, manager(t, kv, "c1", 0))
	if l.Token <= int64(rev) {
		t.Errorf("token %d, want above the unreadable value's revision %d", l.Token, rev)
	}
	if got := current(t, kv); got.Token != l.Token || got.Owner != "c1" {
		t.Errorf("bucket holds %+v, want %+v", got, l.Lease)
	}
}
