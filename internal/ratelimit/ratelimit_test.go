package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/internal/ratelimit"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// newLimiter starts a redis-server of the test's own and a limiter on it.
func newLimiter(t *testing.T, cfg ratelimit.Config) (*ratelimit.Limiter, func(ratelimit.Config) *ratelimit.Limiter) {
	t.Helper()
	rdb := testkit.StartRedis(t).Client(t)
	mk := func(c ratelimit.Config) *ratelimit.Limiter {
		l, err := ratelimit.New(rdb, c)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	return mk(cfg), mk
}

// within fails unless d is in [lo, hi].
func within(t *testing.T, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d < lo || d > hi {
		t.Errorf("%s: wait %s, want between %s and %s", what, d, lo, hi)
	}
}

func TestReservePacesRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// 600 rpm at full headroom, no burst: one call every 100ms.
	l, _ := newLimiter(t, ratelimit.Config{Headroom: 1, Burst: 1}) // 1ns: no burst worth a call
	lim := ratelimit.Limits{RPM: 600}
	for i := range 5 {
		r, err := l.Reserve(ctx, "d1", lim, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := time.Duration(i) * 100 * time.Millisecond
		within(t, "call", r.Wait, want-50*time.Millisecond, want+time.Millisecond)
	}
	// Another deployment is paced alone.
	r, err := l.Reserve(ctx, "d2", lim, 0)
	if err != nil || r.Wait != 0 {
		t.Errorf("first call on another deployment: %s, %v; want no wait", r.Wait, err)
	}
}

func TestReserveBurst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// 600 rpm at 1s of burst: ten calls at once, then paced.
	l, _ := newLimiter(t, ratelimit.Config{Headroom: 1, Burst: time.Second})
	lim := ratelimit.Limits{RPM: 600}
	var waited int
	for range 12 {
		r, err := l.Reserve(ctx, "d", lim, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Wait > 0 {
			waited++
		}
	}
	if waited < 1 || waited > 3 {
		t.Errorf("%d of 12 calls waited, want the 11th and 12th (±1)", waited)
	}
}

func TestSettleGivesTokensBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// 60,000 tpm at full headroom: a token a millisecond.
	l, _ := newLimiter(t, ratelimit.Config{Headroom: 1, Burst: 1})
	lim := ratelimit.Limits{TPM: 60_000}
	r, err := l.Reserve(ctx, "d", lim, 1000)
	if err != nil || r.Wait != 0 {
		t.Fatalf("first reserve: %s, %v", r.Wait, err)
	}
	// Reserved 1000: the next call waits about a second...
	r2, err := l.Reserve(ctx, "d", lim, 1000)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "after a 1000-token reservation", r2.Wait, 900*time.Millisecond, 1001*time.Millisecond)
	// ...until both settle for 100 used: 800 come back after the first,
	// and the second's unsent request gives back all of its own.
	if err := l.Settle(ctx, r, 100, true); err != nil {
		t.Fatal(err)
	}
	if err := l.Settle(ctx, r2, 0, false); err != nil {
		t.Fatal(err)
	}
	r3, err := l.Reserve(ctx, "d", lim, 10)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "after settling for 100", r3.Wait, 0, 101*time.Millisecond)
}

func TestHoldAndMaxWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, mk := newLimiter(t, ratelimit.Config{Headroom: 1, MaxWait: time.Second})
	lim := ratelimit.Limits{RPM: 60}
	if err := l.Hold(ctx, "d", 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// A shorter hold never shortens it.
	if err := l.Hold(ctx, "d", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// Another voter (another limiter on the same Redis) sees the hold.
	other := mk(ratelimit.Config{Headroom: 1, MaxWait: time.Second})
	r, err := other.Reserve(ctx, "d", lim, 0)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "held", r.Wait, 400*time.Millisecond, 501*time.Millisecond)
	// A provider's long hold: the wait is past MaxWait, so the
	// reservation is given back and the caller told.
	if err := l.Hold(ctx, "d", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	_, err = l.Reserve(ctx, "d", lim, 0)
	if !errors.Is(err, ratelimit.ErrTooLong) {
		t.Fatalf("reserve under a 5s hold with MaxWait 1s: %v, want ErrTooLong", err)
	}
}

func TestNoLimitsNoWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := newLimiter(t, ratelimit.Config{})
	for range 100 {
		r, err := l.Reserve(ctx, "free", ratelimit.Limits{}, 1_000_000)
		if err != nil || r.Wait != 0 {
			t.Fatalf("unlimited reserve: %s, %v", r.Wait, err)
		}
		if err := l.Settle(ctx, r, 5, true); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	rdb := testkit.StartMiniredis(t).Client(t)
	for _, c := range []ratelimit.Config{{Headroom: 1.5}, {Headroom: -1}, {MaxWait: -time.Second}} {
		if _, err := ratelimit.New(rdb, c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	if _, err := ratelimit.New(nil, ratelimit.Config{}); err == nil {
		t.Error("nil client accepted")
	}
}

// TestReserveAhead: a wait beyond Ahead is not booked: the caller sleeps
// and books again, and gets a turn at most Ahead away.
func TestReserveAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := newLimiter(t, ratelimit.Config{Headroom: 1, Ahead: 100 * time.Millisecond})
	if err := l.Hold(ctx, "d", 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := l.Reserve(ctx, "d", ratelimit.Limits{RPM: 60}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Wait > 100*time.Millisecond {
		t.Errorf("booked %s ahead, want at most 100ms", r.Wait)
	}
	if took := time.Since(start) + r.Wait; took < 390*time.Millisecond {
		t.Errorf("the call may start %s after asking, before the 400ms hold ends", took)
	}
}

// voterACL is the Redis user docs/operations.md gives voters: the
// limiter's keys and scripts, nothing of the coordinators'.
const voterACL = "on >voter-pw resetkeys ~maker:rl:* resetchannels -@all +hello +auth +ping +evalsha +eval +script|load +get +set +del +time"

// TestVoterACL: the limiter runs as the documented voter user, and that
// user reaches no other key (a leaked voter credential cannot touch a
// tally or a budget).
func TestVoterACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rd := testkit.StartRedis(t)
	if rd.Kind != "redis-server" {
		t.Skip("ACL users need a real redis-server")
	}
	admin := rd.Client(t)
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "voter"}, toAny(strings.Fields(voterACL))...)...).Err(); err != nil {
		t.Fatal(err)
	}
	admin.Set(ctx, "maker:{acme}:budget:j1", "secret", 0)
	vc := redis.NewClient(&redis.Options{Addr: rd.Addr, Username: "voter", Password: "voter-pw"})
	defer vc.Close()
	l, err := ratelimit.New(vc, ratelimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lim := ratelimit.Limits{RPM: 600, TPM: 60_000}
	r, err := l.Reserve(ctx, "d", lim, 100)
	if err != nil {
		t.Fatalf("reserve as the voter user: %v", err)
	}
	if err := l.Settle(ctx, r, 10, true); err != nil {
		t.Fatalf("settle as the voter user: %v", err)
	}
	if err := l.Hold(ctx, "d", time.Millisecond*5); err != nil {
		t.Fatalf("hold as the voter user: %v", err)
	}
	if err := vc.Get(ctx, "maker:{acme}:budget:j1").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("the voter user read a budget key: %v", err)
	}
	if err := vc.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"maker:{acme}:budget:j1"}).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("the voter user read a budget key through a script: %v", err)
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
