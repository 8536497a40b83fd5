package judge_test

import (
	"fmt"
	"strings"

	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

func ExampleDetect() {
	fmt.Println(judge.Detect("break glass: cleanMerge_preservesGap sorry, simp makes no progress", nil))
	fmt.Println(judge.Detect("break glass: pods lose their NATS connection after the TLS handshake", nil))
	fmt.Println(judge.Detect("break glass: it fails", []string{"voter/pull.go"}))
	// Output:
	// lean_proof
	// infra_debug
	// code_bug
}

func ExampleSettings_Gate() {
	s := judge.DefaultSettings()
	for _, est := range []float64{0.25, 0.95} {
		decision, reason := s.Gate(schemas.ProblemCodeBug, est, 1.00, false)
		fmt.Println(strings.TrimSuffix(decision+": "+reason, ": "))
	}
	decision, reason := s.Gate(schemas.ProblemArchitecture, 2.40, 3.00, false)
	fmt.Println(strings.TrimSuffix(decision+": "+reason, ": "))
	// Output:
	// proceed
	// refuse: estimated cost $0.95 is over 3 × the code_bug threshold $0.30 ($0.90): escalate to a human
	// hold: estimated cost $2.40 is over $2.00: held until a person approves
}

func ExampleToArbiterDecision() {
	step := schemas.ArbitrationStep{JobID: "hanoi-10", Step: 731, Task: "hanoi", K: 3, Samples: 100,
		Candidates: []schemas.TallyEntry{{VoteKey: "A", Votes: 45}, {VoteKey: "B", Votes: 40}}}
	req := judge.ArbitrationRequest("acme", step, judge.ArbitrationNotes{LocalModel: "no lead", StrongerModel: "no lead either"})
	resp := &schemas.BreakGlassResponse{Outcome: schemas.BreakGlassAnswered, JudgeModel: "judge", Panel: []string{"a", "b", "c"},
		Solution: schemas.Solution{VoteKey: "B", Confidence: 0.85}}
	d := judge.ToArbiterDecision(req, resp, 0.7)
	fmt.Println(d.Outcome, d.VoteKey, d.Reason)
	resp.Solution.Confidence = 0.5
	d = judge.ToArbiterDecision(req, resp, 0.7)
	fmt.Println(d.Outcome, d.Reason)
	// Output:
	// decided B arbiter decision by judge over a panel of 3 (confidence 0.85)
	// needs_human the judge's confidence 0.50 is below the threshold 0.70
}

func ExampleRedact() {
	fmt.Println(judge.Redact("export OPENAI_API_KEY=abcdefgh12345678 && make test"))
	// Output:
	// export [REDACTED] && make test
}
