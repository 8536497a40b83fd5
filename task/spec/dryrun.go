package spec

import (
	"errors"
	"fmt"

	"github.com/makerfleet/makerfleet/internal/plainjson"
	"github.com/makerfleet/makerfleet/task"
)

// DryRun walks the task from its initial state along the reference
// answers for at most steps steps (to its goal if sooner), doing at each
// what a job does: write the prompt, write and read back the reference
// answer (its schema, regex groups, red flags and vote), move on to the
// next state and ask whether it is the goal. It returns the steps walked
// and the first failure, naming its step: what `maker task validate
// --params` shows a spec's author before any model is paid. A spec
// without a reference (or whose reference is null there) can only be
// walked up to its first prompt; DryRun then stops with an error wrapping
// ErrNoReference.
func (in *Instance) DryRun(steps int64) (int64, error) {
	s := in.Initial()
	for step := range steps {
		next, done, err := in.advance(s, step, true)
		if err != nil || done {
			return step, err
		}
		s = next
	}
	return steps, nil
}

// StateAt is the state at step n along the reference answers (the
// initial state at 0): the step `maker task render` and `maker task
// check` show. It fails, naming the step, where the reference cannot go
// on, and past the goal.
func (in *Instance) StateAt(n int64) (task.State, error) {
	s := in.Initial()
	for step := range n {
		next, done, err := in.advance(s, step, false)
		if err != nil {
			return nil, err
		}
		if done {
			return nil, fmt.Errorf("step %d: the task is done after %d steps", n, step)
		}
		s = next
	}
	return s, nil
}

// advance takes step from s along the reference: the next state, or done
// when s is the goal. With full, the prompt and progress are checked too.
func (in *Instance) advance(s task.State, step int64, full bool) (task.State, bool, error) {
	done, err := in.DoneErr(s)
	if err != nil {
		return nil, false, fmt.Errorf("step %d: done: %w", step, err)
	}
	if done {
		return nil, true, nil
	}
	if step >= in.TotalSteps() {
		return nil, false, fmt.Errorf("step %d: not done after max_steps (%d) steps: a job of these params ends unsolved", step, in.TotalSteps())
	}
	if full {
		if _, err := in.prompt(s); err != nil {
			return nil, false, fmt.Errorf("step %d: prompt: %w", step, err)
		}
	}
	key, _, err := in.ReferenceReply(s)
	if err != nil {
		if errors.Is(err, ErrNoReference) {
			return nil, false, fmt.Errorf("step %d: %w: nothing past it can be walked", step, err)
		}
		return nil, false, fmt.Errorf("step %d: %w", step, err)
	}
	next, err := in.Next(s, task.Vote{Key: key})
	if err != nil {
		return nil, false, fmt.Errorf("step %d: next: %w", step, err)
	}
	if full && in.t.progress != nil {
		vars, err := in.vars(next, nil)
		if err != nil {
			return nil, false, fmt.Errorf("step %d: next state: %w", step, err)
		}
		v, err := in.t.progress.eval("progress", vars)
		if err != nil {
			return nil, false, fmt.Errorf("step %d: progress: %w", step, err)
		}
		// Job status clamps it; a spec's author wants to know.
		if f := toFloat(v); !(f >= 0 && f <= 1) {
			return nil, false, fmt.Errorf("step %d: progress gives %v after the step, want a number in [0, 1]", step, f)
		}
	}
	return next, false, nil
}

// CanonicalState reads a state given by hand (JSON) into its canonical
// form, as the fleet keeps states.
func (in *Instance) CanonicalState(raw []byte) (task.State, error) {
	v, err := plainjson.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", task.ErrInvalidState, err)
	}
	return plainjson.Marshal(v)
}
