package judge

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// limits are the caps reserve holds one key to: a break-glass session's,
// a tenant's over its rolling window or, for its arbitrations, a job's.
type limits struct {
	invocations int
	usd         float64
	// window, when set, counts only calls reserved within it (the tenant's
	// rolling window); zero counts every call the key holds.
	window time.Duration
	// scope ("session", "tenant", "job") and calls ("break-glass calls",
	// "arbitrations") name them in a refusal; per ("this session", "the
	// last 24h0m0s") says over what.
	scope, calls, per string
}

func (s *Settings) sessionLimits() limits {
	return limits{s.SessionInvocations, s.SessionUSD, 0, "session", "break-glass calls", "this session"}
}

// tenantLimits hold a tenant's judge calls over its rolling window: its
// break-glass calls and the arbitrations of its jobs' steps together.
func (s *Settings) tenantLimits() limits {
	return limits{s.TenantInvocations, s.TenantUSD, s.TenantWindow, "tenant", "judge calls (break glass and arbitrations)", "the tenant's last " + s.TenantWindow.String()}
}

func (s *Settings) jobLimits() limits {
	return limits{s.Arbitration.JobInvocations, s.Arbitration.JobUSD, 0, "job", "arbitrations", "this job"}
}

// sessionState is a key's value in the sessions bucket, read and written
// only by judges. Calls maps each request id to the dollars it holds: its
// estimate while it runs, its actual cost once settled. A redelivered
// request finds its own entry and is not counted twice. At holds when each
// call was reserved, for a key with a window (older calls drop out).
type sessionState struct {
	Calls map[string]float64   `json:"calls"`
	At    map[string]time.Time `json:"at,omitempty"`
}

func (st sessionState) spent() float64 {
	var sum float64
	for _, v := range st.Calls {
		sum += v
	}
	return sum
}

// prune drops the calls reserved before since.
func (st *sessionState) prune(since time.Time) {
	for id, at := range st.At {
		if at.Before(since) {
			delete(st.Calls, id)
			delete(st.At, id)
		}
	}
}

// sessions is the typed view of the sessions bucket.
func sessions(kv jetstream.KeyValue) *bus.KV[sessionState] {
	return bus.NewKV(kv, bus.JSONCodec[sessionState]())
}

// seedFunc rebuilds a key's state when the key is absent: never written,
// expired, or deleted. The counters are a cache of what the audit stream
// records; a deleted key must not give a tenant its limits back.
type seedFunc func(ctx context.Context) (*sessionState, error)

// reserve counts request id against the key's limits, holding its
// estimate, atomically (compare-and-set on the key). It returns a reason
// when a limit refuses the call. An absent key starts from seed (nil: from
// nothing).
func reserve(ctx context.Context, kv jetstream.KeyValue, key, id string, estimate float64, l limits, seed seedFunc) (reason string, err error) {
	var seeded *sessionState // read once, however often the update retries
	_, err = sessions(kv).Update(ctx, key, func(st *sessionState) (*sessionState, error) {
		reason = ""
		if st == nil && seed != nil {
			if seeded == nil {
				if seeded, err = seed(ctx); err != nil {
					return nil, err
				}
			}
			st = seeded.clone()
		}
		st = orNew(st)
		now := time.Now().UTC()
		if l.window > 0 {
			st.prune(now.Add(-l.window))
		}
		if _, ok := st.Calls[id]; ok {
			return nil, bus.ErrAbort // a redelivery: already counted
		}
		if n := len(st.Calls); n >= l.invocations {
			reason = fmt.Sprintf("%s limit: %d of %d %s already made in %s", l.scope, n, l.invocations, l.calls, l.per)
			return nil, bus.ErrAbort
		}
		if spent := st.spent(); spent+estimate > l.usd+1e-9 {
			reason = fmt.Sprintf("%s cap: $%.2f spent or reserved in %s plus this call's estimate $%.2f is over the %s's $%.2f", l.scope, spent, l.per, estimate, l.scope, l.usd)
			return nil, bus.ErrAbort
		}
		st.Calls[id] = estimate
		if l.window > 0 {
			st.At[id] = now
		}
		return st, nil
	})
	if err != nil {
		return "", fmt.Errorf("judge: reserve %s: %w", key, err)
	}
	return reason, nil
}

// release gives back request id's reservation on key: a call another
// limit refused after this one had counted it.
func release(ctx context.Context, kv jetstream.KeyValue, key, id string) error {
	_, err := sessions(kv).Update(ctx, key, func(st *sessionState) (*sessionState, error) {
		if st == nil {
			return nil, bus.ErrAbort
		}
		if _, ok := st.Calls[id]; !ok {
			return nil, bus.ErrAbort
		}
		delete(st.Calls, id)
		delete(st.At, id)
		return st, nil
	})
	if err != nil {
		return fmt.Errorf("judge: release %s: %w", key, err)
	}
	return nil
}

// settle replaces request id's reservation with its actual cost. A key
// that has lost its state since the reservation is rebuilt by seed first
// (and the call dated now, when l has a window).
func settle(ctx context.Context, kv jetstream.KeyValue, key, id string, actual float64, l limits, seed seedFunc) error {
	var seeded *sessionState
	_, err := sessions(kv).Update(ctx, key, func(st *sessionState) (*sessionState, error) {
		if st == nil && seed != nil {
			if seeded == nil {
				var err error
				if seeded, err = seed(ctx); err != nil {
					return nil, err
				}
			}
			st = seeded.clone()
		}
		st = orNew(st)
		if _, ok := st.At[id]; !ok && l.window > 0 {
			st.At[id] = time.Now().UTC()
		}
		st.Calls[id] = actual
		return st, nil
	})
	if err != nil {
		return fmt.Errorf("judge: settle %s: %w", key, err)
	}
	return nil
}

// orNew returns st, or an empty state for a key not seen yet, with its
// maps made.
func orNew(st *sessionState) *sessionState {
	if st == nil {
		st = &sessionState{}
	}
	if st.Calls == nil {
		st.Calls = make(map[string]float64)
	}
	if st.At == nil {
		st.At = make(map[string]time.Time)
	}
	return st
}

func (st *sessionState) clone() *sessionState {
	out := orNew(nil)
	if st == nil {
		return out
	}
	for k, v := range st.Calls {
		out.Calls[k] = v
	}
	for k, v := range st.At {
		out.At[k] = v
	}
	return out
}

// ranPanel reports whether an audit record is of a call that reserved its
// limits and reached the models: only those count against them.
func ranPanel(rec *schemas.BreakGlassAudit) bool {
	switch rec.Outcome {
	case schemas.BreakGlassAnswered, schemas.BreakGlassDegraded, schemas.BreakGlassFailed:
		return true
	}
	return false
}

// auditSeed rebuilds a key's counters from the audit stream: the calls of
// tenant (and session, "" for all of the tenant's) of the request kinds
// that ran the panel, at their actual cost, and only those recorded since
// now-window when window is set. The audit stream is append-only for
// every identity but the judge's and the admin's, so a client that could
// delete a counter still cannot make the judge forget what it spent.
// Calls that were running when the key went are not in the audit yet,
// and are not counted: the gap is at most the calls in flight.
func (sv *Service) auditSeed(tenant, session string, window time.Duration, kinds ...string) seedFunc {
	return func(ctx context.Context) (*sessionState, error) {
		recs, err := ListAudit(ctx, sv.js, sv.topo.NS, tenant, session)
		if err != nil {
			return nil, err
		}
		st := orNew(nil)
		since := time.Now().Add(-window)
		for i := range recs {
			rec := &recs[i]
			k := rec.RequestKind
			if k == "" {
				k = schemas.KindBreakGlassRequest
			}
			if !slices.Contains(kinds, k) || !ranPanel(rec) || rec.Tenant != tenant || window > 0 && rec.At.Before(since) {
				continue
			}
			st.Calls[rec.RequestID] = rec.ActualUSD
			if window > 0 {
				st.At[rec.RequestID] = rec.At
			}
		}
		return st, nil
	}
}
