package judge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
)

// reserve under contention, from two connections (two replicas): exactly
// as many calls fit as the limits allow, whatever the interleaving, and a
// call reserved twice counts once.
func TestReserveConcurrent(t *testing.T) {
	t.Parallel()
	url := testkit.StartNATS(t).URL
	var kvs []jetstream.KeyValue
	for range 2 {
		_, js := testkit.Connect(t, url)
		topo, err := topology.EnsureJudge(context.Background(), js, topology.JudgeConfig{})
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, topo.Sessions)
	}
	s := DefaultSettings()
	s.SessionInvocations = 3
	tests := []struct {
		key      string
		estimate float64
		want     int
	}{
		{"acme.count", 0.01, 3}, // the invocation limit binds
		{"acme.money", 1.80, 2}, // the $5 cap binds: 3 × 1.80 > 5
		{"acme.exact", 1.25, 3}, // 4 × 1.25 = 5 would fit the cap; the count binds
	}
	for _, tt := range tests {
		var mu sync.Mutex
		reserved := 0
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				reason, err := reserve(context.Background(), kvs[i%2], tt.key, fmt.Sprintf("r%d", i), tt.estimate, s.sessionLimits(), nil)
				if err != nil {
					t.Error(err)
				}
				if reason == "" {
					mu.Lock()
					reserved++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if reserved != tt.want {
			t.Errorf("%s: %d calls reserved, want %d", tt.key, reserved, tt.want)
		}
		e, err := kvs[0].Get(context.Background(), tt.key)
		if err != nil {
			t.Fatal(err)
		}
		var st sessionState
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Calls) != tt.want || st.spent() > s.SessionUSD {
			t.Errorf("%s: state %+v", tt.key, st)
		}
		// A redelivered call that already holds a reservation is let
		// through without counting again.
		for id := range st.Calls {
			if reason, err := reserve(context.Background(), kvs[1], tt.key, id, tt.estimate, s.sessionLimits(), nil); err != nil || reason != "" {
				t.Errorf("re-reserving %s: %q, %v", id, reason, err)
			}
			break
		}
	}
}

// A tenant's window counts only the calls reserved within it; a key that
// is missing starts from its seed (the audit trail), not from nothing.
func TestReserveWindowAndSeed(t *testing.T) {
	t.Parallel()
	url := testkit.StartNATS(t).URL
	_, js := testkit.Connect(t, url)
	ctx := context.Background()
	topo, err := topology.EnsureJudge(ctx, js, topology.JudgeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l := limits{invocations: 2, usd: 10, window: time.Hour, scope: "tenant", calls: "calls", per: "the window"}
	now := time.Now().UTC()
	old := &sessionState{Calls: map[string]float64{"old-1": 1, "old-2": 1}, At: map[string]time.Time{"old-1": now.Add(-2 * time.Hour), "old-2": now.Add(-90 * time.Minute)}}
	if _, err := sessions(topo.Sessions).Create(ctx, "acme.tenant.window", old); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"new-1", "new-2"} {
		if reason, err := reserve(ctx, topo.Sessions, "acme.tenant.window", id, 1, l, nil); err != nil || reason != "" {
			t.Fatalf("%s: %q, %v: calls out of the window still count", id, reason, err)
		}
	}
	if reason, _ := reserve(ctx, topo.Sessions, "acme.tenant.window", "new-3", 1, l, nil); !strings.Contains(reason, "tenant limit: 2 of 2") {
		t.Errorf("third call in the window: %q", reason)
	}

	seeds := 0
	seed := func(context.Context) (*sessionState, error) {
		seeds++
		return &sessionState{Calls: map[string]float64{"spent-1": 4, "spent-2": 5}}, nil
	}
	l = limits{invocations: 5, usd: 10, scope: "session", calls: "calls", per: "this session"}
	if reason, err := reserve(ctx, topo.Sessions, "acme.s9", "x", 2, l, seed); err != nil || !strings.Contains(reason, "session cap: $9.00 spent") {
		t.Errorf("reserve on a missing key: %q, %v; want the seed's $9 counted", reason, err)
	}
	if reason, err := reserve(ctx, topo.Sessions, "acme.s9", "y", 0.5, l, seed); err != nil || reason != "" {
		t.Errorf("a call that fits: %q, %v", reason, err)
	}
	if seeds != 2 {
		t.Errorf("seeded %d times, want once per reserve while the key is missing", seeds)
	}
	if err := release(ctx, topo.Sessions, "acme.s9", "y"); err != nil {
		t.Fatal(err)
	}
	st, _, err := sessions(topo.Sessions).Get(ctx, "acme.s9")
	if err != nil || len(st.Calls) != 2 {
		t.Errorf("after release: %+v, %v", st, err)
	}
}
