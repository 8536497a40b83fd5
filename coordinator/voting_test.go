package coordinator_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/voter"
)

// Scripted answers, by letter:
//
//	A  the right answer
//	B  the reversed move with the right next state (wrong, but the run
//	   goes on from the right pegs)
//	C  the right move with the state left unchanged (same move, another
//	   next_state: another candidate)
//	!  a reply the strict parser rejects (red flag)
func answer(letter byte, c fleettest.Call) llm.Response {
	switch letter {
	case 'A':
		return fleettest.Right(c)
	case 'B':
		return fleettest.Say(fleettest.ReversedMove(c))
	case 'C':
		return fleettest.Say(fleettest.SameMoveWrongState(c))
	case '!':
		return fleettest.Garbage()
	}
	panic("unknown answer letter " + string(letter))
}

// candidate is the answer a letter stands for at the step starting at st.
func candidate(letter byte, st hanoi.State) hanoi.Answer {
	c := fleettest.Call{State: st}
	c.Truth, c.TruthErr = fleettest.TrueAnswer(st)
	switch letter {
	case 'A':
		return c.Truth
	case 'B':
		return fleettest.ReversedMove(c)
	case 'C':
		return fleettest.SameMoveWrongState(c)
	}
	panic("no candidate for " + string(letter))
}

// sequential is the reference rule, applied to answers in index order:
// first-to-ahead-by-k, red flags ('!') count for nobody. It returns the
// winner and how many answers were used, or 0 and len(answers).
func sequential(answers string, k int) (byte, int) {
	votes := map[byte]int{}
	for i := range len(answers) {
		a := answers[i]
		if a == '!' {
			continue
		}
		votes[a]++
		var top, second int
		var lead byte
		for c, n := range votes {
			switch {
			case n > top:
				second, top, lead = top, n, c
			case n > second:
				second = n
			}
		}
		if top-second >= k {
			return lead, i + 1
		}
	}
	return 0, len(answers)
}

// scriptedFleet starts a coordinator and a voter (concurrency 16) whose
// fake model answers by script, placing calls by the seeds of jobSeed.
func scriptedFleet(t *testing.T, jobSeed, steps int64, script fleettest.Script) (*fleettest.Env, *fleettest.FakeModel) {
	t.Helper()
	env := fleettest.New(t)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, steps, 64), script)
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(model, voter.Config{Concurrency: 16})
	return env, model
}

// indicesAt lists the distinct indices the model was asked for at step.
func indicesAt(recs []fleettest.Record, step int64) []int {
	var idx []int
	for _, r := range recs {
		if r.Known && r.Step == step && !slices.Contains(idx, r.Index) {
			idx = append(idx, r.Index)
		}
	}
	slices.Sort(idx)
	return idx
}

// TestVotingRule: one step of a hanoi run gets fixed answers by index,
// arriving in shuffled order (higher indices answer first). The decision
// must be the sequential first-to-ahead-by-k rule in index order: not
// first-to-k, no early stop below margin k, red flags replaced; and the
// coordinator must draw exactly the samples the rule uses (waves never
// overshoot, so nothing is paid for after the decision).
func TestVotingRule(t *testing.T) {
	t.Parallel()
	const disks, step = 3, 2
	keys, states := fleettest.Golden(disks)
	cases := []struct {
		name    string
		k       int
		answers string
	}{
		{"ahead-by-k, not first-to-k (A has 3 votes at index 4)", 3, "ABABAAA"},
		{"no early stop at lead k-1", 3, "AABAA"},
		{"lead is over the runner-up; red flags count for nobody", 2, "BACA!AA"},
		{"a wrong candidate that leads by k wins", 2, "BBABB"},
		{"single candidate needs k votes", 3, "AAA"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			winner, used := sequential(tc.answers, tc.k)
			if winner == 0 {
				t.Fatalf("bad case: %q is undecided at k=%d", tc.answers, tc.k)
			}
			const jobSeed = 99
			steps := int64(len(keys))
			env, model := scriptedFleet(t, jobSeed, steps, func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
				if c.Step != step {
					return fleettest.Right(c), nil
				}
				// Shuffled arrival: the higher the index, the sooner the answer.
				if err := fleettest.Wait(ctx, time.Duration(12-c.Index)*10*time.Millisecond); err != nil {
					return llm.Response{}, err
				}
				if c.Index < len(tc.answers) {
					return answer(tc.answers[c.Index], c), nil
				}
				return fleettest.Right(c), nil // never asked for, unless a wave overshoots
			})
			spec := fleettest.HanoiSpec(disks, tc.k, jobSeed)
			rep := env.Run(&spec)
			checkCounters(t, rep)
			checkNoWaste(t, rep)

			wantKeys := slices.Clone(keys)
			wantKeys[step] = candidate(winner, states[step]).Key()
			if rep.TraceSHA256 != fleettest.Trace(wantKeys) {
				t.Errorf("trace %s: step %d was not decided for %c", rep.TraceSHA256, step, winner)
			}
			if winner == 'A' {
				checkSolved(t, rep, disks)
			} else if rep.Errors != 1 || !slices.Equal(rep.ErrorSteps, []int64{step}) || rep.State != schemas.StateUnsolved {
				t.Errorf("wrong winner: errors %d at %v, state %s; want 1 error at step %d, unsolved", rep.Errors, rep.ErrorSteps, rep.State, step)
			}
			// Every other step is unanimous: k samples each.
			if want := int64(tc.k)*(steps-1) + int64(used); rep.Samples != want {
				t.Errorf("samples %d, want %d (k=%d a step, %d at step %d)", rep.Samples, want, tc.k, used, step)
			}
			if used > tc.k && (rep.MaxSamplesInStep != used || rep.MaxSamplesStep != step) {
				t.Errorf("max samples %d at step %d, want %d at step %d", rep.MaxSamplesInStep, rep.MaxSamplesStep, used, step)
			}
			want := make([]int, used)
			for i := range want {
				want[i] = i
			}
			if got := indicesAt(model.Records(), step); !slices.Equal(got, want) {
				t.Errorf("model asked for indices %v at step %d, want %v: the rule decides at index %d", got, step, want, used-1)
			}
		})
	}
}

// TestNextStateFromWinner: the next step starts from the winner's own
// next_state, as the model wrote it. Candidates with the same move and
// different next states are different candidates (peer mistake: voting on
// the move, then taking the state from the last sample), and a wrong state
// that wins is used as is, never recomputed from the move.
func TestNextStateFromWinner(t *testing.T) {
	t.Parallel()
	const disks, step, k = 3, 2, 2
	keys, states := fleettest.Golden(disks)
	cases := []struct {
		name    string
		answers string
		winner  byte
	}{
		// Voting on the move alone would decide at index 1 (two votes for
		// the move) and take index 1's unchanged state.
		{"the right state wins over the same move with another state", "ACAA", 'A'},
		{"a winning wrong state is used as the model wrote it", "CACC", 'C'},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const jobSeed = 7
			steps := int64(len(keys))
			env, model := scriptedFleet(t, jobSeed, steps, func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
				if c.Step != step || c.Index >= len(tc.answers) {
					return fleettest.Right(c), nil
				}
				// The C answers arrive last in their wave: arrival order
				// must not matter.
				if tc.answers[c.Index] == 'C' {
					if err := fleettest.Wait(ctx, 30*time.Millisecond); err != nil {
						return llm.Response{}, err
					}
				}
				return answer(tc.answers[c.Index], c), nil
			})
			spec := fleettest.HanoiSpec(disks, k, jobSeed)
			spec.MaxSamplesPerStep = 20
			requests := fleettest.Capture[schemas.SampleRequest](env, bus.DefaultNamespace.SampleSubject(spec.Tenant, spec.JobID))
			rep := env.Run(&spec)
			checkCounters(t, rep)

			win := candidate(tc.winner, states[step])
			wantState := fleettest.StateJSON(win)
			var next int
			for _, req := range requests.All() {
				if req.Step != step+1 {
					continue
				}
				next += 1 + len(req.Also) // a wave's samples in one request
				if !bytes.Equal(req.State, wantState) {
					t.Errorf("step %d index %d starts from %s, want the winner's %s", req.Step, req.Index, req.State, wantState)
				}
			}
			if next < k {
				t.Fatalf("%d requests seen for step %d, want at least k=%d", next, step+1, k)
			}
			for _, r := range model.Records() {
				if r.Known && r.Step == step+1 {
					if got := hanoi.FormatPegs(r.State.Pegs); got != hanoi.FormatPegs(win.NextState) || r.State.Prev == nil || *r.State.Prev != win.Move {
						t.Errorf("the model was prompted at step %d with %s after %v, want %s after %v",
							r.Step, got, r.State.Prev, hanoi.FormatPegs(win.NextState), win.Move)
					}
				}
			}
			if got := indicesAt(model.Records(), step); len(got) != len(tc.answers) {
				t.Errorf("step %d drew indices %v, want %d: same move with another state must not vote together", step, got, len(tc.answers))
			}
			if tc.winner == 'A' {
				checkSolved(t, rep, disks)
				return
			}
			if rep.Errors < 1 || rep.ErrorSteps[0] != step {
				t.Errorf("errors %d at %v, want step %d flagged by the verifier", rep.Errors, rep.ErrorSteps, step)
			}
			if rep.Solved || !schemas.Terminal(rep.State) {
				t.Errorf("state %s after a wrong winning state", rep.State)
			}
			if rep.Steps < step+1 {
				t.Errorf("only %d steps decided", rep.Steps)
			}
		})
	}
}

// TestSampleCap: a step whose answers alternate between two candidates
// forever never reaches a lead of k; at the cap (20 samples) the job ends
// as no_consensus, naming the step, its samples and both candidates, and
// draws nothing more. Peer mistake: no cap at all.
func TestSampleCap(t *testing.T) {
	t.Parallel()
	const disks, step, k, maxSamples, jobSeed = 3, 1, 2, 20, 5
	keys, states := fleettest.Golden(disks)
	env, model := scriptedFleet(t, jobSeed, int64(len(keys)), func(_ context.Context, c fleettest.Call) (llm.Response, error) {
		if c.Step == step && c.Index%2 == 1 {
			return answer('B', c), nil
		}
		return fleettest.Right(c), nil
	})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.MaxSamplesPerStep = maxSamples
	rep := env.Run(&spec)
	checkCounters(t, rep)

	if rep.State != schemas.StateNoConsensus || rep.Solved {
		t.Fatalf("state %s (reason %q), want no_consensus", rep.State, rep.Reason)
	}
	nc := rep.NoConsensus
	if nc == nil || nc.Step != step || nc.Samples != maxSamples {
		t.Fatalf("no_consensus %+v, want step %d with %d samples", nc, step, maxSamples)
	}
	want := []schemas.TallyEntry{
		{VoteKey: candidate('A', states[step]).Key(), Votes: maxSamples / 2},
		{VoteKey: candidate('B', states[step]).Key(), Votes: maxSamples / 2},
	}
	slices.SortFunc(want, func(a, b schemas.TallyEntry) int {
		if a.VoteKey < b.VoteKey {
			return -1
		}
		return 1
	})
	if !slices.Equal(nc.Tally, want) {
		t.Errorf("tally %+v, want %+v", nc.Tally, want)
	}
	if rep.Steps != step || rep.Samples != int64(k*step+maxSamples) {
		t.Errorf("steps %d, samples %d; want %d steps and %d samples", rep.Steps, rep.Samples, step, k*step+maxSamples)
	}
	if got := indicesAt(model.Records(), step); len(got) != maxSamples || got[len(got)-1] != maxSamples-1 {
		t.Errorf("model asked for indices %v at step %d, want 0..%d", got, step, maxSamples-1)
	}
	if n := len(indicesAt(model.Records(), step+1)); n != 0 {
		t.Errorf("the job went on to step %d after no consensus (%d samples)", step+1, n)
	}
	if rep.Reason == "" {
		t.Error("a no_consensus report without a reason")
	}
	t.Logf("reason: %s", rep.Reason)
}
