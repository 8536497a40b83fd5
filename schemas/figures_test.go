package schemas_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestFiguresAddSub: Sub is the change Add puts back: counts, red flags by
// reason, appended step lists, the hardest step; a count that went down is
// no negative change.
func TestFiguresAddSub(t *testing.T) {
	base := schemas.Figures{Steps: 3, Samples: 9, Votes: 8, RedFlagged: 1, RedFlags: map[string]int64{"parse": 1},
		ErrorSteps: []int64{1}, MaxSamplesInStep: 4, MaxSamplesStep: 2, PromptTokens: 900, ArbiterCostUSD: 0.5,
		ForgedResults: 2, OverclaimedResults: 1}
	cur := base.Clone()
	cur.Steps, cur.Samples, cur.Votes = 4, 14, 12
	cur.ForgedResults, cur.OverclaimedResults = 5, 3
	cur.RedFlagged, cur.RedFlags["length"] = 2, 1
	cur.ErrorSteps = append(cur.ErrorSteps, 3)
	cur.MaxSamplesInStep, cur.MaxSamplesStep = 5, 3
	cur.PromptTokens = 800 // a duplicate's tokens taken back
	cur.ArbiterCostUSD = 0.75
	d := cur.Sub(base)
	want := schemas.Figures{Steps: 1, Samples: 5, Votes: 4, RedFlagged: 1, RedFlags: map[string]int64{"length": 1},
		ErrorSteps: []int64{3}, MaxSamplesInStep: 5, MaxSamplesStep: 3, ArbiterCostUSD: 0.25,
		ForgedResults: 3, OverclaimedResults: 2}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("Sub = %+v\nwant  %+v", d, want)
	}
	sum := base.Clone()
	sum.Add(d)
	sum.PromptTokens = cur.PromptTokens // the one figure left pending
	if !reflect.DeepEqual(sum, cur) {
		t.Errorf("base + change = %+v\nwant           %+v", sum, cur)
	}
	if (schemas.Figures{}).Sub(cur).PromptTokens != 0 {
		t.Error("a negative change")
	}
}

// TestFiguresStepListsCapped: step lists stop at MaxListedSteps.
func TestFiguresStepListsCapped(t *testing.T) {
	var f schemas.Figures
	for i := range schemas.MaxListedSteps + 10 {
		f.Add(schemas.Figures{ErrorSteps: []int64{int64(i)}, ArbiterSteps: []int64{int64(i)}})
	}
	if len(f.ErrorSteps) != schemas.MaxListedSteps || len(f.ArbiterSteps) != schemas.MaxListedSteps {
		t.Errorf("lists of %d and %d steps", len(f.ErrorSteps), len(f.ArbiterSteps))
	}
}

// TestDeltaJSON: a change leaves its zero fields out and reads back
// strictly.
func TestDeltaJSON(t *testing.T) {
	d := schemas.Delta{Figures: schemas.Figures{Steps: 1, Samples: 3, RedFlags: map[string]int64{"parse": 1}, PromptTokens: 300}}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"steps":1,"samples":3,"red_flags":{"parse":1},"prompt_tokens":300}`; string(b) != want {
		t.Errorf("Delta JSON %s, want %s", b, want)
	}
	var back schemas.Delta
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, d) {
		t.Errorf("read back %+v (%v), want %+v", back, err, d)
	}
	if err := json.Unmarshal([]byte(`{"late":1}`), &back); err == nil {
		t.Error("an unknown field was accepted")
	}
	if b, _ := json.Marshal(schemas.Delta{}); string(b) != "{}" {
		t.Errorf("empty change %s, want {}", b)
	}
}
