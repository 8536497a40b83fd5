package spec_test

import (
	"encoding/json"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// BenchmarkHanoiStep is a task's work for one step of 10-disk hanoi as the
// fleet does it at k=2, along the solution (so nothing is cached from the
// step before): the prompt twice (the voters), two replies read, the
// winner's next state three times (two votes screened and the decision),
// the verifier once. The spec (examples/tasks/hanoi.yaml) beside the
// built-in Go task.
func BenchmarkHanoiStep(b *testing.B) {
	params := json.RawMessage(`{"disks": 10}`)
	builtin, err := hanoi.Task{}.Bind(params)
	if err != nil {
		b.Fatal(err)
	}
	type step struct {
		state task.State
		reply string
	}
	var path []step
	st := builtin.Initial()
	for range builtin.TotalSteps() {
		s, _ := builtin.(*hanoi.Instance).DecodeState(st)
		mv, _ := hanoi.StrategyMove(s.Pegs, s.Prev, 10)
		next, _ := hanoi.Apply(s.Pegs, mv)
		reply := "Following the strategy.\n\nmove = " + hanoi.FormatMove(mv) + "\nnext_state = " + hanoi.FormatPegs(next)
		path = append(path, step{st, reply})
		v, _ := builtin.Parse(st, reply)
		st, _ = builtin.Next(st, v)
	}
	for _, tc := range []struct {
		name string
		in   func(b *testing.B) task.Instance
	}{
		{"builtin", func(*testing.B) task.Instance { return builtin }},
		{"spec", func(b *testing.B) task.Instance {
			in, err := example(b, "hanoi.yaml").Bind(params)
			if err != nil {
				b.Fatal(err)
			}
			return in
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			in := tc.in(b)
			i := 0
			for b.Loop() {
				s := path[i%len(path)]
				i++
				for range 2 {
					if _, err := in.Prompt(s.state); err != nil {
						b.Fatal(err)
					}
				}
				var v task.Vote
				for range 2 {
					if v, err = in.Parse(s.state, s.reply); err != nil {
						b.Fatal(err)
					}
				}
				for range 3 {
					if _, err := in.Next(s.state, v); err != nil {
						b.Fatal(err)
					}
				}
				if err := in.(task.Verifier).Verify(s.state, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
