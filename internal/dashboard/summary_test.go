package dashboard_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/dashboard"
	"github.com/makerfleet/makerfleet/schemas"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	entry := func(typ string, f func(*schemas.JournalEntry)) schemas.JournalEntry {
		e := schemas.JournalEntry{Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: "alpha", JobID: "j1",
			Type: typ, Token: 3, Owner: "c1", Step: 41, At: at}
		if f != nil {
			f(&e)
		}
		return e
	}
	tests := []struct {
		name string
		seq  uint64
		in   schemas.JournalEntry
		want schemas.StepSummary
	}{
		{"decision by the own model", 7, entry(schemas.EntryDecision, func(e *schemas.JournalEntry) {
			e.VoteKey, e.Votes, e.Lead = "move 1 2", 5, 3
			e.Counted, e.Valid, e.RedFlagged = 8, 7, 1
			e.RedFlags = map[string]int{"too_long": 1}
			e.Tally = []schemas.TallyEntry{{VoteKey: "move 1 2", Votes: 5}, {VoteKey: "move 1 3", Votes: 2}}
		}), schemas.StepSummary{Seq: 7, Type: "decision", Step: 41, Samples: 8, Counted: 8, Valid: 7, RedFlagged: 1,
			RedFlags: map[string]int{"too_long": 1}, Votes: 5, Lead: 3, Rung: "own_model", At: at}},
		{"decision by the stronger model counts every rung's samples", 9, entry(schemas.EntryDecision, func(e *schemas.JournalEntry) {
			e.Votes, e.Lead, e.Counted, e.Valid = 3, 3, 3, 3
			e.Rung = schemas.RungStrongerModel
			e.Prior = []schemas.RungTally{{Rung: schemas.RungOwnModel, Counted: 20, Valid: 18, RedFlagged: 2}}
		}), schemas.StepSummary{Seq: 9, Type: "decision", Step: 41, Samples: 23, Counted: 3, Valid: 3, Votes: 3, Lead: 3,
			Rung: "stronger_model", At: at}},
		{"arbiter", 10, entry(schemas.EntryArbiter, func(e *schemas.JournalEntry) {
			e.Rung = schemas.RungPanel
			e.Prior = []schemas.RungTally{{Rung: schemas.RungOwnModel, Counted: 12, Valid: 10, RedFlagged: 2},
				{Rung: schemas.RungStrongerModel, Counted: 6, Valid: 6}}
		}), schemas.StepSummary{Seq: 10, Type: "arbiter", Step: 41, Samples: 18, Rung: "panel", At: at}},
		{"escalation names the rung climbed to", 11, entry(schemas.EntryEscalation, func(e *schemas.JournalEntry) {
			e.Rung = schemas.RungStrongerModel
			e.Prior = []schemas.RungTally{{Rung: schemas.RungOwnModel, Counted: 20}}
		}), schemas.StepSummary{Seq: 11, Type: "escalation", Step: 41, Samples: 20, Rung: "stronger_model", At: at}},
		{"an adaptive-k step says its k and what its work cost", 14, entry(schemas.EntryDecision, func(e *schemas.JournalEntry) {
			e.K, e.Votes, e.Lead, e.Counted, e.Valid = 13, 13, 13, 13, 13
			// 2.5 µ$ of answers at the fleet's prices, 0.25 $ of arbitration
			// and 0.4 µ$ unpriced.
			e.Work.SampleCostNanoUSD, e.Work.ArbiterCostUSD, e.Work.UnverifiedCostNanoUSD = 2500, 0.25, 400
		}), schemas.StepSummary{Seq: 14, Type: "decision", Step: 41, Samples: 13, Counted: 13, Valid: 13, Votes: 13, Lead: 13,
			Rung: "own_model", K: 13, USD: 0.2500025, UnverifiedUSD: 0.0000004, At: at}},
		{"takeover", 12, entry(schemas.EntryTakeover, nil),
			schemas.StepSummary{Seq: 12, Type: "takeover", Step: 41, At: at}},
		{"end", 13, entry(schemas.EntryEnd, func(e *schemas.JournalEntry) {
			e.State, e.Reason = schemas.StateSolved, ""
		}), schemas.StepSummary{Seq: 13, Type: "end", Step: 41, State: "solved", At: at}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := dashboard.Summarize(tt.seq, &tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Summarize:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// The summary is what the brief's stream promises on the wire: snake_case
// names, counts always present, and a copy of the red flags (the entry's
// map is not shared).
func TestSummarizeWire(t *testing.T) {
	t.Parallel()
	e := schemas.JournalEntry{Type: schemas.EntryDecision, Step: 2, Counted: 3, Valid: 2, RedFlagged: 1,
		RedFlags: map[string]int{"unparseable": 1}, Votes: 2, Lead: 2}
	s := dashboard.Summarize(5, &e)
	e.RedFlags["unparseable"] = 99
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"seq", "type", "step", "samples", "counted", "valid", "red_flagged", "red_flags", "votes", "lead", "rung", "at"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	if got := m["red_flags"].(map[string]any)["unparseable"]; got != 1.0 {
		t.Errorf("red_flags shares the entry's map: %v", got)
	}
}
