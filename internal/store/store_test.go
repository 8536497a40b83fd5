package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// backends runs fn against a real redis-server and against miniredis: the
// store's conformance suite.
func backends(t *testing.T, fn func(t *testing.T, s *store.Store, r *testkit.Redis)) {
	t.Helper()
	for _, name := range []string{"redis-server", "miniredis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var r *testkit.Redis
			if name == "redis-server" {
				r = testkit.StartRedis(t)
			} else {
				r = testkit.StartMiniredis(t)
			}
			s, err := store.New(r.Client(t), store.Config{})
			if err != nil {
				t.Fatal(err)
			}
			fn(t, s, r)
		})
	}
}

// vote and rf build sample answers: "A" is a vote for A, "!" a red flag.
func smp(step, epoch int64, index int, answer string) vote.Sample {
	if answer == "!" {
		return vote.Sample{Step: step, Epoch: epoch, Index: index, RedFlag: "parse"}
	}
	return vote.Sample{Step: step, Epoch: epoch, Index: index, VoteKey: answer}
}

// reference is the rule in Go (internal/core/vote): the winner and how
// many answers (by index) were counted, or "" if none won.
func reference(answers []string, k int) (string, int) {
	var t vote.Tally
	if _, _, err := t.Open(0, 1); err != nil {
		panic(err)
	}
	for i, a := range answers {
		if res, _ := t.Record(smp(0, 1, i, a), k); res.Outcome == vote.Decided {
			return res.Decision.Winner, res.Decision.Counted
		}
	}
	return "", len(answers)
}

// TestVotingRule is the table of the voting rule, including the mistakes
// peers made (MAKER-FACTS §5).
func TestVotingRule(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		k       int
		answers []string
		winner  string // "" = undecided after all answers
		used    int    // answers consumed when decided
	}{
		{"single candidate needs k votes, max over others is 0", 3, []string{"A", "A", "A"}, "A", 3},
		{"k=1 takes the first valid vote", 1, []string{"!", "B", "A"}, "B", 2},
		{"first-to-k is not the rule: A reaches 3 votes but leads by 1", 3, []string{"A", "B", "A", "B", "A"}, "", 5},
		{"ahead-by-k decides once the lead is k", 3, []string{"A", "B", "A", "B", "A", "A", "A"}, "A", 7},
		{"no early stop below margin: lead k-1 is undecided", 3, []string{"A", "A", "B", "A"}, "", 4},
		{"fixed-batch majority is not the rule: 4 of 6 for A, lead 2 < 3", 3, []string{"A", "B", "A", "A", "B", "A"}, "", 6},
		{"red flags count for nobody", 2, []string{"A", "!", "!", "A"}, "A", 4},
		{"lead is over the runner-up, not the sum of others", 2, []string{"A", "B", "C", "A", "A"}, "A", 5},
		{"same move with another next state is another candidate", 2,
			[]string{`{"move":[1,0,2],"next_state":[[2],[],[1]]}`, `{"move":[1,0,2],"next_state":[[1],[],[2]]}`, `{"move":[1,0,2],"next_state":[[2],[],[1]]}`},
			"", 3},
		{"a late majority wins after a wrong start", 2, []string{"B", "A", "A", "A"}, "A", 4},
		{"decision stops counting: later answers are not consumed", 2, []string{"A", "A", "B", "B"}, "A", 2},
		{"ties keep the step open", 1, []string{"!"}, "", 1},
	}
	for _, tc := range cases {
		if w, u := reference(tc.answers, tc.k); w != tc.winner || (w != "" && u != tc.used) {
			t.Fatalf("%s: reference rule gives %q after %d, table says %q after %d", tc.name, w, u, tc.winner, tc.used)
		}
	}
	backends(t, func(t *testing.T, s *store.Store, _ *testkit.Redis) {
		ctx := context.Background()
		for i, tc := range cases {
			job := store.JobRef{Tenant: "default", JobID: fmt.Sprintf("rule%d", i)}
			if _, _, err := s.OpenStep(ctx, job, 0, 1); err != nil {
				t.Fatal(err)
			}
			var got *vote.Decision
			for idx, a := range tc.answers {
				res, err := s.Record(ctx, job, smp(0, 1, idx, a), tc.k)
				if err != nil {
					t.Fatal(err)
				}
				if got != nil {
					if res.Outcome != vote.Stale && res.Outcome != vote.Replayed {
						t.Errorf("%s: answer after the decision: %v, want stale or replayed", tc.name, res.Outcome)
					}
					continue
				}
				if res.Outcome == vote.Decided {
					got = res.Decision
				}
			}
			switch {
			case tc.winner == "" && got != nil:
				t.Errorf("%s: decided %q with lead %d, want undecided", tc.name, got.Winner, got.Lead)
			case tc.winner != "" && got == nil:
				t.Errorf("%s: undecided, want %q", tc.name, tc.winner)
			case got != nil:
				if got.Winner != tc.winner || got.Counted != tc.used || got.Lead < tc.k {
					t.Errorf("%s: decided %q after %d (lead %d), want %q after %d", tc.name, got.Winner, got.Counted, got.Lead, tc.winner, tc.used)
				}
				if got.Tally[0].VoteKey != got.Winner || got.Tally[0].Votes != got.Votes {
					t.Errorf("%s: tally %v does not start with the winner", tc.name, got.Tally)
				}
			}
		}
	})
}

// TestOrderIndependence: answers arriving in any order give the decision
// the sequential rule gives in index order.
func TestOrderIndependence(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, s *store.Store, _ *testkit.Redis) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(1, 2))
		alphabet := []string{"A", "A", "A", "B", "C", "!"}
		for trial := 0; trial < 60; trial++ {
			k := 1 + rng.IntN(3)
			answers := make([]string, 4+rng.IntN(12))
			for i := range answers {
				answers[i] = alphabet[rng.IntN(len(alphabet))]
			}
			wantWinner, wantUsed := reference(answers, k)
			job := store.JobRef{Tenant: "default", JobID: fmt.Sprintf("perm%d", trial)}
			if _, _, err := s.OpenStep(ctx, job, 0, 1); err != nil {
				t.Fatal(err)
			}
			var got *vote.Decision
			for _, idx := range rng.Perm(len(answers)) {
				res, err := s.Record(ctx, job, smp(0, 1, idx, answers[idx]), k)
				if err != nil {
					t.Fatal(err)
				}
				if res.Outcome == vote.Decided {
					if got != nil {
						t.Fatalf("trial %d: decided twice", trial)
					}
					got = res.Decision
				}
			}
			if wantWinner == "" {
				if got != nil {
					t.Fatalf("trial %d %v k=%d: decided %q, want none", trial, answers, k, got.Winner)
				}
				continue
			}
			if got == nil || got.Winner != wantWinner || got.Counted != wantUsed {
				t.Fatalf("trial %d %v k=%d: got %+v, want %q after %d", trial, answers, k, got, wantWinner, wantUsed)
			}
		}
	})
}

func TestIdempotence(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, s *store.Store, r *testkit.Redis) {
		ctx := context.Background()
		job := store.JobRef{Tenant: "acme", JobID: "idem"}
		if _, err := s.Record(ctx, job, smp(0, 1, 0, "A"), 2); !errors.Is(err, store.ErrNoStep) {
			t.Fatalf("record before open: %v, want ErrNoStep", err)
		}
		c, opened, err := s.OpenStep(ctx, job, 0, 1)
		if err != nil || !opened || c.Step != 0 || c.Epoch != 1 {
			t.Fatalf("open: %+v %v %v", c, opened, err)
		}
		if _, opened, err := s.OpenStep(ctx, job, 0, 1); err != nil || opened {
			t.Fatalf("reopen same step: opened=%v err=%v, want a no-op", opened, err)
		}
		mustRecord := func(sm vote.Sample, want vote.Outcome) vote.RecordResult {
			t.Helper()
			res, err := s.Record(ctx, job, sm, 2)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != want {
				t.Fatalf("record %+v: %v, want %v", sm, res.Outcome, want)
			}
			return res
		}
		mustRecord(smp(0, 1, 0, "A"), vote.Recorded)
		dup := mustRecord(smp(0, 1, 0, "B"), vote.Duplicate) // a retry or redelivery of index 0
		if dup.Counters.Valid != 1 || dup.Counters.Next != 1 {
			t.Fatalf("duplicate changed the count: %+v", dup.Counters)
		}
		mustRecord(smp(0, 2, 1, "A"), vote.Stale) // another epoch
		mustRecord(smp(1, 1, 1, "A"), vote.Stale) // another step
		mustRecord(smp(0, 1, 2, "A"), vote.Recorded)
		if res := mustRecord(smp(0, 1, 3, "!"), vote.Recorded); res.Counters.Next != 1 {
			t.Fatalf("index 1 missing, yet counted up to %d", res.Counters.Next)
		}
		// SCRIPT FLUSH mid-step: the client reloads the script.
		if r.Kind == "redis-server" {
			if err := r.Client(t).ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		dec := mustRecord(smp(0, 1, 1, "A"), vote.Decided) // fills the gap: A,A decides
		if dec.Decision.Winner != "A" || dec.Decision.Counted != 2 || dec.Decision.Votes != 2 {
			t.Fatalf("decision %+v", dec.Decision)
		}
		// A retried call whose reply was lost replays the decision.
		rep := mustRecord(smp(0, 1, 1, "A"), vote.Replayed)
		if rep.Decision == nil || rep.Decision.Winner != "A" || rep.Decision.Step != 0 {
			t.Fatalf("replay %+v", rep.Decision)
		}
		// The next step is open and empty; the old step's answers are gone.
		mustRecord(smp(1, 1, 0, "B"), vote.Recorded)
		if _, _, err := s.OpenStep(ctx, job, 0, 1); !errors.Is(err, store.ErrStaleOpen) {
			t.Fatalf("reopening an older step: %v, want ErrStaleOpen", err)
		}
		// A new epoch of the open step starts a fresh tally.
		if _, opened, err := s.OpenStep(ctx, job, 1, 2); err != nil || !opened {
			t.Fatalf("new epoch: %v %v", opened, err)
		}
		mustRecord(smp(1, 1, 1, "B"), vote.Stale)
		if res := mustRecord(smp(1, 2, 0, "B"), vote.Recorded); res.Counters.Valid != 1 {
			t.Fatalf("fresh epoch count %+v", res.Counters)
		}
		tally, closed, err := s.CloseStep(ctx, job, 1, 2)
		if err != nil || !closed || len(tally) != 1 || tally[0].Votes != 1 {
			t.Fatalf("close: %v %v %v", tally, closed, err)
		}
		if _, closed, err := s.CloseStep(ctx, job, 1, 2); err != nil || closed {
			t.Fatalf("second close: closed=%v err=%v, want a no-op", closed, err)
		}
		mustRecord(smp(1, 2, 1, "B"), vote.Stale)
		if err := s.DeleteJob(ctx, job); err != nil {
			t.Fatal(err)
		}
		if n, err := r.Client(t).Keys(ctx, "maker:*").Result(); err != nil || len(n) != 0 {
			t.Fatalf("keys left after delete: %v %v", n, err)
		}
	})
}

// TestKeysDoNotGrow: only the open step is kept, whatever the step count.
func TestKeysDoNotGrow(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, s *store.Store, r *testkit.Redis) {
		ctx := context.Background()
		job := store.JobRef{Tenant: "default", JobID: "grow"}
		if _, _, err := s.OpenStep(ctx, job, 0, 1); err != nil {
			t.Fatal(err)
		}
		for step := int64(0); step < 200; step++ {
			for i, a := range []string{"A", "B", "A", "A"} {
				if _, err := s.Record(ctx, job, smp(step, 1, i, a), 2); err != nil {
					t.Fatal(err)
				}
			}
		}
		keys, err := r.Client(t).Keys(ctx, "maker:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 3 {
			t.Fatalf("%d keys after 200 steps: %v", len(keys), keys)
		}
		n, err := r.Client(t).HLen(ctx, "maker:{default/grow}:step").Result()
		if err != nil || n > 20 {
			t.Fatalf("step hash has %d fields (%v)", n, err)
		}
	})
}

func BenchmarkRecord(b *testing.B) {
	for _, name := range []string{"redis-server", "miniredis"} {
		b.Run(name, func(b *testing.B) {
			var r *testkit.Redis
			if name == "redis-server" {
				r = testkit.StartRedis(b)
			} else {
				r = testkit.StartMiniredis(b)
			}
			s, err := store.New(r.Client(b), store.Config{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			job := store.JobRef{Tenant: "default", JobID: "bench"}
			if _, _, err := s.OpenStep(ctx, job, 0, 1); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step, idx := int64(i/3), i%3
				if _, err := s.Record(ctx, job, smp(step, 1, idx, `{"move":[1,0,2],"next_state":[[3,2],[],[1]]}`), 3); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFailures: failed attempts at a job are counted per job, survive
// DeleteJob (which every fresh attempt runs, so a count kept with the
// job's hot state would never reach the limit), expire a day after the
// last failure, and start again from 1 once cleared.
func TestFailures(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, s *store.Store, r *testkit.Redis) {
		ctx := context.Background()
		job := store.JobRef{Tenant: "acme", JobID: "flaky"}
		other := store.JobRef{Tenant: "acme", JobID: "steady"}
		for want := int64(1); want <= 3; want++ {
			n, err := s.AddFailure(ctx, job)
			if err != nil || n != want {
				t.Fatalf("failure %d: count %d, %v", want, n, err)
			}
		}
		if n, err := s.AddFailure(ctx, other); err != nil || n != 1 {
			t.Fatalf("another job's first failure: count %d, %v; jobs must not share a count", n, err)
		}
		// A fresh attempt clears the job's hot state, not its failures.
		if _, _, err := s.OpenStep(ctx, job, 0, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteJob(ctx, job); err != nil {
			t.Fatal(err)
		}
		if n, err := s.AddFailure(ctx, job); err != nil || n != 4 {
			t.Fatalf("after DeleteJob: count %d, %v; want 4", n, err)
		}
		keys, err := r.Client(t).Keys(ctx, "maker:{acme/flaky}:*").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("keys of the job: %v, %v; want only its failure count", keys, err)
		}
		ttl, err := r.Client(t).TTL(ctx, keys[0]).Result()
		if err != nil || ttl <= 23*time.Hour || ttl > 24*time.Hour {
			t.Errorf("failure count TTL %v (%v), want about a day", ttl, err)
		}

		if err := s.ClearFailures(ctx, job); err != nil {
			t.Fatal(err)
		}
		if err := s.ClearFailures(ctx, job); err != nil {
			t.Fatalf("clearing twice: %v", err)
		}
		if n, err := s.AddFailure(ctx, job); err != nil || n != 1 {
			t.Fatalf("after ClearFailures: count %d, %v; want 1", n, err)
		}
		if n, err := s.AddFailure(ctx, other); err != nil || n != 2 {
			t.Fatalf("clearing one job touched another: count %d, %v; want 2", n, err)
		}
		if err := s.ClearFailures(ctx, store.JobRef{Tenant: "acme", JobID: "never-failed"}); err != nil {
			t.Fatalf("clearing a job without failures: %v", err)
		}
	})
}

// TestKeyPrefix: stores with different prefixes on one Redis share no key,
// tallies and failure counts alike; the default prefix is "maker".
func TestKeyPrefix(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, def *store.Store, r *testkit.Redis) {
		ctx := context.Background()
		other, err := store.New(r.Client(t), store.Config{KeyPrefix: "run-1"})
		if err != nil {
			t.Fatal(err)
		}
		job := store.JobRef{Tenant: "acme", JobID: "same"}
		for _, s := range []*store.Store{def, other} {
			if _, _, err := s.OpenStep(ctx, job, 0, 1); err != nil {
				t.Fatal(err)
			}
			if res, err := s.Record(ctx, job, smp(0, 1, 0, "A"), 2); err != nil || res.Outcome != vote.Recorded || res.Counters.Valid != 1 {
				t.Fatalf("record: %+v, %v; want a first vote in each store", res, err)
			}
			if n, err := s.AddFailure(ctx, job); err != nil || n != 1 {
				t.Fatalf("failure: %d, %v; want a first failure in each store", n, err)
			}
		}
		for prefix, want := range map[string]int{"maker:*": 4, "run-1:*": 4} {
			if keys, err := r.Client(t).Keys(ctx, prefix).Result(); err != nil || len(keys) != want {
				t.Errorf("keys %s: %v (%v), want %d", prefix, keys, err, want)
			}
		}
		if err := other.DeleteJob(ctx, job); err != nil {
			t.Fatal(err)
		}
		if res, err := def.Record(ctx, job, smp(0, 1, 1, "A"), 2); err != nil || res.Outcome != vote.Decided {
			t.Errorf("the default store after the other deleted its job: %+v, %v; want its step intact", res, err)
		}
		for _, bad := range []string{"a:b", "{x}", "a b"} {
			if _, err := store.New(r.Client(t), store.Config{KeyPrefix: bad}); err == nil {
				t.Errorf("KeyPrefix %q accepted", bad)
			}
		}
	})
}
