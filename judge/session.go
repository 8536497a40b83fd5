package judge

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// limits are the caps reserve holds one key to: a break-glass session's
// or, for its arbitrations, a job's.
type limits struct {
	invocations int
	usd         float64
	// scope ("session", "job") and calls ("break-glass calls",
	// "arbitrations") name them in a refusal.
	scope, calls string
}

func (s *Settings) sessionLimits() limits {
	return limits{s.SessionInvocations, s.SessionUSD, "session", "break-glass calls"}
}

func (s *Settings) jobLimits() limits {
	return limits{s.Arbitration.JobInvocations, s.Arbitration.JobUSD, "job", "arbitrations"}
}

// sessionState is a session's (or a job's) value in the sessions bucket,
// read and written only by judges. Calls maps each request id to the dollars it
// holds: its estimate while it runs, its actual cost once settled. A
// redelivered request finds its own entry and is not counted twice.
type sessionState struct {
	Calls map[string]float64 `json:"calls"`
}

func (st sessionState) spent() float64 {
	var sum float64
	for _, v := range st.Calls {
		sum += v
	}
	return sum
}

// sessions is the typed view of the sessions bucket.
func sessions(kv jetstream.KeyValue) *bus.KV[sessionState] {
	return bus.NewKV(kv, bus.JSONCodec[sessionState]())
}

// reserve counts request id against the key's limits, holding its
// estimate, atomically (compare-and-set on the key). It returns a reason
// when a limit refuses the call.
func reserve(ctx context.Context, kv jetstream.KeyValue, key, id string, estimate float64, l limits) (reason string, err error) {
	_, err = sessions(kv).Update(ctx, key, func(st *sessionState) (*sessionState, error) {
		reason = ""
		st = orNew(st)
		if _, ok := st.Calls[id]; ok {
			return nil, bus.ErrAbort // a redelivery: already counted
		}
		if n := len(st.Calls); n >= l.invocations {
			reason = fmt.Sprintf("%s limit: %d of %d %s already made in this %s", l.scope, n, l.invocations, l.calls, l.scope)
			return nil, bus.ErrAbort
		}
		if spent := st.spent(); spent+estimate > l.usd+1e-9 {
			reason = fmt.Sprintf("%s cap: $%.2f spent or reserved plus this call's estimate $%.2f is over the %s's $%.2f", l.scope, spent, estimate, l.scope, l.usd)
			return nil, bus.ErrAbort
		}
		st.Calls[id] = estimate
		return st, nil
	})
	if err != nil {
		return "", fmt.Errorf("judge: reserve %s: %w", key, err)
	}
	return reason, nil
}

// settle replaces request id's reservation with its actual cost.
func settle(ctx context.Context, kv jetstream.KeyValue, key, id string, actual float64) error {
	_, err := sessions(kv).Update(ctx, key, func(st *sessionState) (*sessionState, error) {
		st = orNew(st)
		st.Calls[id] = actual
		return st, nil
	})
	if err != nil {
		return fmt.Errorf("judge: settle %s: %w", key, err)
	}
	return nil
}

// orNew returns st, or an empty state for a session not seen yet, with
// its map made.
func orNew(st *sessionState) *sessionState {
	if st == nil {
		st = &sessionState{}
	}
	if st.Calls == nil {
		st.Calls = make(map[string]float64)
	}
	return st
}
