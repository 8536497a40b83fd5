package store_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestVoteConformance runs the vote rule's conformance table against the
// Lua scripts on a real redis-server (and miniredis): every operation must
// give what the table wants and exactly what the Go rule (vote.Tally)
// gives — outcome, counters, decision, tally and error.
func TestVoteConformance(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, s *store.Store, _ *testkit.Redis) {
		ctx := context.Background()
		for n, tc := range vote.Cases() {
			t.Run(tc.Name, func(t *testing.T) {
				job := store.JobRef{Tenant: "conformance", JobID: fmt.Sprintf("case-%d", n)}
				var ref vote.Tally
				for i, op := range tc.Ops {
					want, wantErr := op.Apply(&ref)
					got, err := apply(ctx, s, job, op)
					if msg := op.Check(got, err); msg != "" {
						t.Fatalf("op %d (Lua): %s", i, msg)
					}
					if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
						t.Fatalf("op %d: Lua gave %+v, %v; the Go rule %+v, %v", i, describe(got), err, describe(want), wantErr)
					}
				}
			})
		}
	})
}

func apply(ctx context.Context, s *store.Store, job store.JobRef, op vote.Op) (*vote.RecordResult, error) {
	switch {
	case op.Open != nil:
		_, _, err := s.OpenStep(ctx, job, op.Open[0], op.Open[1])
		return nil, err
	case op.Close != nil:
		_, _, err := s.CloseStep(ctx, job, op.Close[0], op.Close[1])
		return nil, err
	}
	res, err := s.Record(ctx, job, *op.Record, op.K)
	if err != nil {
		return nil, err
	}
	return &res, nil
}

func describe(r *vote.RecordResult) string {
	if r == nil {
		return "<nil>"
	}
	d := "<nil>"
	if r.Decision != nil {
		d = fmt.Sprintf("%+v", *r.Decision)
	}
	return fmt.Sprintf("{%v %+v %s}", r.Outcome, r.Counters, d)
}
