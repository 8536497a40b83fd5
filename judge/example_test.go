package judge_test

import (
	"fmt"
	"strings"

	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/judge/guard"
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

func ExampleSettings_ArbitrationGate() {
	s := judge.DefaultSettings()
	for _, est := range []float64{0.25, 0.95} {
		decision, reason := s.ArbitrationGate(est, s.Arbitration.BudgetUSD, false)
		fmt.Println(strings.TrimSuffix(decision+": "+reason, ": "))
	}
	// Output:
	// proceed
	// refuse: estimated cost $0.95 is over 3 × the arbitration threshold $0.30 ($0.90): escalate to a human
}

func ExampleRedact() {
	fmt.Println(guard.Redact("export OPENAI_API_KEY=abcdefgh12345678 && make test"))
	// Output:
	// export [REDACTED] && make test
}
