package hanoi_test

import (
	"testing"

	"github.com/makerfleet/makerfleet/task/hanoi"
)

// TestStepOfFollowsTheSolution: along the optimal solution, StepOf counts
// the moves made and Progress rises from 0 to 1; a state off the path is
// not on it.
func TestStepOfFollowsTheSolution(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 9; n++ {
		in, _ := hanoi.New(n)
		s := in.Initial()
		for step := int64(0); ; step++ {
			st, err := in.DecodeState(s)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := hanoi.StepOf(st.Pegs, n)
			if !ok || got != step {
				t.Fatalf("n=%d step %d: StepOf = %d, %v", n, step, got, ok)
			}
			if p := in.Progress(s); p != float64(step)/float64(in.TotalSteps()) {
				t.Fatalf("n=%d step %d: progress %v", n, step, p)
			}
			if in.Done(s) {
				break
			}
			m, _ := hanoi.StrategyMove(st.Pegs, st.Prev, n)
			next, _ := hanoi.Apply(st.Pegs, m)
			s = hanoi.EncodeState(hanoi.State{Pegs: next, Prev: &m})
		}
	}
	if _, ok := hanoi.StepOf(hanoi.Pegs{{3, 2}, {1}, {}}, 3); ok {
		t.Error("disk 1 alone on the spare peg first is not on the optimal path for n=3")
	}
	if _, ok := hanoi.StepOf(hanoi.Pegs{{1, 2, 3}, {}, {}}, 3); ok {
		t.Error("an upside-down tower is on no path")
	}
}
