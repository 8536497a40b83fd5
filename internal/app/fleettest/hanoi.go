package fleettest

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/makerfleet/makerfleet/internal/core/step"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// TrueAnswer is the strategy's move from st and the state it leads to: the
// right answer to the step that starts at st.
func TrueAnswer(st hanoi.State) (hanoi.Answer, error) {
	n := 0
	for _, peg := range st.Pegs {
		n += len(peg)
	}
	mv, err := hanoi.StrategyMove(st.Pegs, st.Prev, n)
	if err != nil {
		return hanoi.Answer{}, err
	}
	next, err := hanoi.Apply(st.Pegs, mv)
	if err != nil {
		return hanoi.Answer{}, err
	}
	return hanoi.Answer{Move: mv, NextState: next}, nil
}

// Golden returns the fault-free run of disks: the vote key decided at each
// step and the state each step starts from, computed from the strategy
// (hanoi.StrategyMove and hanoi.Apply), not by the fleet.
func Golden(disks int) (keys []string, states []hanoi.State) {
	in, err := hanoi.New(disks)
	if err != nil {
		panic(err)
	}
	st, err := in.DecodeState(in.Initial())
	if err != nil {
		panic(err)
	}
	for range in.TotalSteps() {
		a, err := TrueAnswer(st)
		if err != nil {
			panic(fmt.Sprintf("golden run of %d disks: %v", disks, err))
		}
		states = append(states, st)
		keys = append(keys, a.Key())
		mv := a.Move
		st = hanoi.State{Pegs: a.NextState, Prev: &mv}
	}
	return keys, states
}

// Trace is the report's trace_sha256 of decided keys: sha256 over each key
// followed by "\n".
func Trace(keys []string) string {
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{'\n'})
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// GoldenTrace is Trace(Golden(disks)).
func GoldenTrace(disks int) string {
	keys, _ := Golden(disks)
	return Trace(keys)
}

// Pos is a sample's place: its step and index.
type Pos struct {
	Step  int64
	Index int
}

// SeedTable maps the model seed of each (step, index) with step < steps and
// index < indices back to its place, as step.SampleSeed derives
// seeds from jobSeed. It panics if two places share a seed: pick another
// job seed.
func SeedTable(jobSeed, steps int64, indices int) map[int64]Pos {
	t := make(map[int64]Pos, int(steps)*indices)
	for s := range steps {
		for i := range indices {
			seed := step.SampleSeed(jobSeed, s, i)
			if old, dup := t[seed]; dup {
				panic(fmt.Sprintf("fleettest: job seed %d: places %v and %v share model seed %d", jobSeed, old, Pos{s, i}, seed))
			}
			t[seed] = Pos{s, i}
		}
	}
	return t
}

// StateJSON is the canonical wire form of the state after answer a: the
// winner's own next_state and move.
func StateJSON(a hanoi.Answer) json.RawMessage {
	mv := a.Move
	return json.RawMessage(hanoi.EncodeState(hanoi.State{Pegs: a.NextState, Prev: &mv}))
}
