package plan_test

import (
	"fmt"

	"github.com/makerfleet/makerfleet/internal/core/plan"
)

// The paper's run: 20 disks, a per-step error rate of 0.2%, target 95%.
func ExampleCompute() {
	steps, err := plan.Steps(20)
	if err != nil {
		panic(err)
	}
	pl, err := plan.Compute(plan.Input{P: 0.998, Steps: steps, Target: 0.95})
	if err != nil {
		panic(err)
	}
	fmt.Printf("steps %d\n", pl.Steps)
	fmt.Printf("k_min %d\n", pl.KMin)
	fmt.Printf("expected votes per step %.2f\n", pl.ExpectedVotesPerStep)
	fmt.Printf("p_full %.4f\n", pl.PFull)
	// Output:
	// steps 1048575
	// k_min 3
	// expected votes per step 3.01
	// p_full 0.9916
}

func ExampleCompute_invalid() {
	_, err := plan.Compute(plan.Input{P: 0.5, Steps: 1000})
	fmt.Println(err)
	// Output:
	// plan: invalid input: p = 0.5: voting does not converge when a sample is no more likely right than wrong; p must be above 0.5
}
