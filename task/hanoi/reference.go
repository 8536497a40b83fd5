package hanoi

import (
	"fmt"
	"math/bits"
	"math/rand/v2"

	"github.com/makerfleet/makerfleet/task"
)

var (
	_ task.Referencer = (*Instance)(nil)
	_ task.Drawer     = (*Instance)(nil)
)

// ReferenceVote implements task.Referencer: the strategy's move from s and
// the state it leads to, as the canonical key Parse gives a right reply. A
// state the strategy has no move from (the goal) or whose move is illegal
// (pegs out of order) yields an error wrapping task.ErrNoReference.
func (in *Instance) ReferenceVote(s task.State) (task.Vote, error) {
	st, err := in.DecodeState(s)
	if err != nil {
		return task.Vote{}, err
	}
	m, err := StrategyMove(st.Pegs, st.Prev, in.n)
	if err != nil {
		return task.Vote{}, fmt.Errorf("%w: %v", task.ErrNoReference, err)
	}
	next, err := Apply(st.Pegs, m)
	if err != nil {
		return task.Vote{}, fmt.Errorf("%w: strategy move: %v", task.ErrNoReference, err)
	}
	return task.Vote{Key: Answer{Move: m, NextState: next}.Key()}, nil
}

// DrawState implements task.Drawer: a step index drawn uniformly from
// [0, 2^n − 1) and the state the optimal solution reaches after that many
// moves, with Prev set to the move that led there (none at step 0), byte for
// byte the state a right run hands that step.
func (in *Instance) DrawState(rng *rand.Rand) (task.State, int64, error) {
	step := rng.Int64N(in.TotalSteps())
	return encodeState(OptimalState(in.n, step)), step, nil
}

// OptimalState returns the state of the n-disk optimal solution (all disks
// from peg 0 to peg 2) after step moves, 0 ≤ step ≤ 2^n − 1, in O(n) without
// making the moves: Prev is the step-th move, nil at step 0. It panics on a
// step outside that range.
func OptimalState(n int, step int64) State {
	if n < 1 || n > MaxDisks || step < 0 || step > int64(1)<<n-1 {
		panic(fmt.Sprintf("hanoi: OptimalState(%d, %d) out of range", n, step))
	}
	st := State{Pegs: optimalPegs(n, step)}
	if step > 0 {
		// Move number step moves disk 1 + trailing zeros of step; read its
		// pegs off the states on either side.
		d := 1 + bits.TrailingZeros64(uint64(step))
		from := pegOf(optimalPegs(n, step-1), d)
		to := pegOf(st.Pegs, d)
		st.Prev = &Move{d, from, to}
	}
	return st
}

// optimalPegs places the disks largest first: in the first half of the
// moves disk d stays on the source while the smaller tower goes to the
// spare peg; in the second half it sits on the target and the smaller
// tower comes from the spare peg (StepOf is the inverse).
func optimalPegs(n int, step int64) Pegs {
	p := Pegs{{}, {}, {}}
	src, spare, dst := 0, 1, 2
	for d := n; d >= 1; d-- {
		half := int64(1) << (d - 1)
		if step < half {
			p[src] = append(p[src], d)
			spare, dst = dst, spare
		} else {
			p[dst] = append(p[dst], d)
			step -= half
			src, spare = spare, src
		}
	}
	return p
}

func pegOf(p Pegs, d int) int {
	for i, peg := range p {
		for _, x := range peg {
			if x == d {
				return i
			}
		}
	}
	return -1
}
