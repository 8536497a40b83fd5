package judge

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/testkit"
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
		topo, err := bus.EnsureJudge(context.Background(), js, bus.JudgeConfig{})
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
				reason, err := reserve(context.Background(), kvs[i%2], tt.key, fmt.Sprintf("r%d", i), tt.estimate, s.sessionLimits())
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
			if reason, err := reserve(context.Background(), kvs[1], tt.key, id, tt.estimate, s.sessionLimits()); err != nil || reason != "" {
				t.Errorf("re-reserving %s: %q, %v", id, reason, err)
			}
			break
		}
	}
}
