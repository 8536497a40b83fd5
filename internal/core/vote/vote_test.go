package vote_test

import (
	"testing"

	"github.com/makerfleet/makerfleet/internal/core/vote"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tc := range vote.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			var tally vote.Tally
			for i, op := range tc.Ops {
				res, err := op.Apply(&tally)
				if msg := op.Check(res, err); msg != "" {
					t.Fatalf("op %d: %s", i, msg)
				}
			}
		})
	}
}

// TestCheckCatches: a table a wrong rule passes tests nothing.
func TestCheckCatches(t *testing.T) {
	t.Parallel()
	op := vote.Cases()[1].Ops[3] // the third "a" decides at k=3
	if msg := op.Check(&vote.RecordResult{Outcome: vote.Recorded}, nil); msg == "" {
		t.Fatal("a rule that did not decide passed")
	}
	d := &vote.Decision{Winner: "b", Lead: 3}
	if msg := op.Check(&vote.RecordResult{Outcome: vote.Decided, Decision: d}, nil); msg == "" {
		t.Fatal("a wrong winner passed")
	}
	if msg := op.Check(nil, vote.ErrNoStep); msg == "" {
		t.Fatal("an unexpected error passed")
	}
}

func TestStandings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		votes     map[string]int
		lead, top int
		key       string
		name      string
	}{
		{nil, 0, 0, "", "none"},
		{map[string]int{"a": 3}, 3, 3, "a", "one"},
		{map[string]int{"a": 3, "b": 1}, 2, 3, "a", "two"},
		{map[string]int{"a": 2, "b": 2, "c": 1}, 0, 2, "a", "tie"},
		{map[string]int{"b": 2, "a": 2}, 0, 2, "a", "tie by key"},
		{map[string]int{"a": 1, "b": 4, "c": 3}, 1, 4, "b", "three"},
	} {
		lead, key, top := vote.Standings(tc.votes)
		if lead != tc.lead || key != tc.key || top != tc.top {
			t.Errorf("%s: Standings = %d %q %d, want %d %q %d", tc.name, lead, key, top, tc.lead, tc.key, tc.top)
		}
	}
}

func TestDecisionCounters(t *testing.T) {
	t.Parallel()
	var tally vote.Tally
	if _, _, err := tally.Open(2, 1); err != nil {
		t.Fatal(err)
	}
	for i, s := range []vote.Sample{
		{Step: 2, Epoch: 1, Index: 0, RedFlag: "parse"},
		{Step: 2, Epoch: 1, Index: 1, VoteKey: "a"},
		{Step: 2, Epoch: 1, Index: 2, VoteKey: "b"},
		{Step: 2, Epoch: 1, Index: 3, VoteKey: "a"},
	} {
		res, err := tally.Record(s, 2)
		if err != nil || res.Outcome != vote.Recorded {
			t.Fatalf("sample %d: %v %v", i, res.Outcome, err)
		}
	}
	res, err := tally.Record(vote.Sample{Step: 2, Epoch: 1, Index: 4, VoteKey: "a"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := vote.Counters{Step: 2, Epoch: 1, Next: 5, Valid: 4, RedFlagged: 1, Lead: 2}
	if res.Outcome != vote.Decided || res.Counters != want {
		t.Fatalf("got %v %+v, want decided %+v", res.Outcome, res.Counters, want)
	}
	d := res.Decision
	if d.Votes != 3 || d.Counted != 5 || len(d.Tally) != 2 || d.Tally[0].VoteKey != "a" || d.Tally[1].Votes != 1 {
		t.Fatalf("decision %+v", d)
	}
	if c := tally.Counters(); c != (vote.Counters{Step: 3, Epoch: 1}) {
		t.Fatalf("next step's counters %+v", c)
	}
}
