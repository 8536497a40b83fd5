// Package ratelimit shares a provider deployment's request and token
// limits among every voter of the fleet, in Redis.
//
// A voter reserves a call before it sends it (Reserve: one request and the
// tokens the call may use at most), waits the delay the reservation comes
// with, and settles it when the answer is in (Settle: the tokens it did
// not use are given back). Each limit is a GCRA theoretical arrival time
// per deployment, changed by one Lua script with the server's clock, so
// voters on many machines pace themselves as one client and no provider
// key learns its limit by failing. A provider that says otherwise (a 429
// with Retry-After, "x-ratelimit-remaining-requests: 0") puts a hold on
// the deployment (Hold) that every voter honours.
//
// Keys, with the default prefix "maker" and a deployment's name under its
// hash tag (one Redis Cluster slot per deployment):
//
//	maker:rl:{<deployment>}:req   string  requests TAT (ms)
//	maker:rl:{<deployment>}:tok   string  tokens TAT (ms)
//	maker:rl:{<deployment>}:hold  string  no call before this time (ms)
//
// Each expires a minute after the time it stands for. The keys are the
// only ones a voter's Redis user needs (docs/operations.md, "Providers").
package ratelimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed reserve.lua
	reserveLua string
	//go:embed settle.lua
	settleLua string
	//go:embed hold.lua
	holdLua string

	reserveScript = redis.NewScript(reserveLua)
	settleScript  = redis.NewScript(settleLua)
	holdScript    = redis.NewScript(holdLua)
)

// Defaults of Config.
const (
	DefaultPrefix   = "maker"
	DefaultHeadroom = 0.95
	DefaultBurst    = 500 * time.Millisecond
	DefaultMaxWait  = 30 * time.Second
	DefaultAhead    = time.Second
)

// ErrTooLong: the wait for a reservation would pass Config.MaxWait; the
// reservation was given back. Another deployment, or later.
var ErrTooLong = errors.New("ratelimit: deployment busy for longer than the wait allowed")

// Limits are a deployment's limits per minute (0: none).
type Limits struct {
	RPM, TPM int64
}

// None reports whether no limit is set.
func (l Limits) None() bool { return l.RPM <= 0 && l.TPM <= 0 }

// Config configures a Limiter.
type Config struct {
	// Prefix of every key. Default "maker".
	Prefix string
	// Headroom is the share of each limit the fleet aims at, so clocks,
	// network jitter and the provider's own window never push it over.
	// Default 0.95; in (0, 1].
	Headroom float64
	// Burst is how far ahead of its pace the fleet may run at once, as
	// time at the limit's rate: 1s lets a deployment of 600 rpm take 10
	// calls at once. Default 500ms: well inside the second's worth a
	// provider's key holds, so the jitter between a voter's turn and its
	// call's arrival never finds the provider's bucket empty.
	Burst time.Duration
	// MaxWait is the longest a reservation may wait; a longer one is given
	// back and Reserve returns ErrTooLong. Default 30s.
	MaxWait time.Duration
	// Ahead is the furthest ahead a call is reserved: a caller who would
	// wait longer gives its reservation back, sleeps, and asks again. So
	// the tokens a call gives back when it settles go to calls not yet
	// scheduled, and many waiting callers do not book the limit seconds
	// ahead at their estimates. Default 1s.
	Ahead time.Duration
}

// Limiter paces calls on deployments. Safe for concurrent use.
type Limiter struct {
	rdb redis.Scripter
	cfg Config
}

// New returns a Limiter on rdb.
func New(rdb redis.Scripter, cfg Config) (*Limiter, error) {
	if rdb == nil {
		return nil, errors.New("ratelimit: nil Redis client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Headroom == 0 {
		cfg.Headroom = DefaultHeadroom
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.Ahead == 0 {
		cfg.Ahead = DefaultAhead
	}
	if !(cfg.Headroom > 0 && cfg.Headroom <= 1) || cfg.Burst < 0 || cfg.MaxWait < 0 || cfg.Ahead < 0 {
		return nil, fmt.Errorf("ratelimit: invalid config: headroom %v (want (0, 1]), burst %s, max wait %s, ahead %s", cfg.Headroom, cfg.Burst, cfg.MaxWait, cfg.Ahead)
	}
	return &Limiter{rdb: rdb, cfg: cfg}, nil
}

// Reservation is a call reserved on a deployment; settle it once.
type Reservation struct {
	// Wait is how long the caller waits before sending the call.
	Wait   time.Duration
	name   string
	lim    Limits
	tokens int64
}

func (l *Limiter) keys(name string) []string {
	base := l.cfg.Prefix + ":rl:{" + name + "}:"
	return []string{base + "req", base + "tok", base + "hold"}
}

// interval is the ms one unit of a limit per minute takes, at the
// headroom; "0" for no limit.
func (l *Limiter) interval(perMinute int64) string {
	if perMinute <= 0 {
		return "0"
	}
	return strconv.FormatFloat(60_000/(float64(perMinute)*l.cfg.Headroom), 'g', 17, 64)
}

// Reserve reserves one call of at most tokens tokens on the deployment
// name under lim. The call may be sent after r.Wait (at most Ahead): a
// longer wait is given back and slept before asking again, and once the
// whole wait would pass MaxWait, Reserve gives up with ErrTooLong. With
// no limit and no hold it returns at once (one round trip).
func (l *Limiter) Reserve(ctx context.Context, name string, lim Limits, tokens int64) (Reservation, error) {
	tokens = max(tokens, 0)
	r := Reservation{name: name, lim: lim, tokens: tokens}
	keys := l.keys(name)
	var slept time.Duration
	for {
		us, err := reserveScript.Run(ctx, l.rdb, keys,
			l.interval(lim.RPM), l.interval(lim.TPM), l.cfg.Burst.Milliseconds(), tokens).Int64()
		if err != nil {
			return r, fmt.Errorf("ratelimit: reserve on %s: %w", name, err)
		}
		r.Wait = time.Duration(us) * time.Microsecond
		if r.Wait <= l.cfg.Ahead {
			return r, nil
		}
		if err := l.settle(ctx, r, 1, tokens); err != nil {
			return Reservation{}, err
		}
		if slept+r.Wait > l.cfg.MaxWait {
			return Reservation{}, fmt.Errorf("%w: %s for %s (at most %s)", ErrTooLong, (slept + r.Wait).Round(time.Millisecond), name, l.cfg.MaxWait)
		}
		// Back a little before the turn it had, to book it again.
		nap := r.Wait - l.cfg.Ahead/2
		t := time.NewTimer(nap)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Reservation{}, ctx.Err()
		}
		slept += nap
	}
}

// Settle ends r: used is what the call took (prompt and completion
// tokens); sent false gives the request back too (the call was never
// made).
func (l *Limiter) Settle(ctx context.Context, r Reservation, used int64, sent bool) error {
	if r.lim.None() {
		return nil
	}
	var req int64
	if !sent {
		req, used = 1, 0
	}
	return l.settle(ctx, r, req, r.tokens-max(used, 0))
}

func (l *Limiter) settle(ctx context.Context, r Reservation, requests, tokens int64) error {
	if (requests == 0 || r.lim.RPM <= 0) && (tokens == 0 || r.lim.TPM <= 0) {
		return nil
	}
	keys := l.keys(r.name)
	err := settleScript.Run(ctx, l.rdb, keys[:2], l.interval(r.lim.RPM), l.interval(r.lim.TPM), requests, tokens).Err()
	if err != nil {
		return fmt.Errorf("ratelimit: settle on %s: %w", r.name, err)
	}
	return nil
}

// Hold stops every call on the deployment name from starting for d (a
// provider's Retry-After, or its reset time when it says nothing
// remains). A hold only ever lengthens.
func (l *Limiter) Hold(ctx context.Context, name string, d time.Duration) error {
	ms := d.Milliseconds()
	if ms <= 0 {
		return nil
	}
	if err := holdScript.Run(ctx, l.rdb, l.keys(name)[2:], ms).Err(); err != nil {
		return fmt.Errorf("ratelimit: hold %s: %w", name, err)
	}
	return nil
}
