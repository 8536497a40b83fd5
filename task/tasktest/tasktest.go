// Package tasktest is the conformance suite every task.Task must pass. A
// task author calls Run from a test with params to bind and an oracle that
// answers a step's prompt the way a perfect model would.
package tasktest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/makerfleet/makerfleet/task"
)

// Config describes the task under test.
type Config struct {
	// Task is the task under test.
	Task task.Task
	// Params are valid params to bind (at least one set; small instances
	// keep the suite fast).
	Params []json.RawMessage
	// InvalidParams must all be refused by Bind.
	InvalidParams []json.RawMessage
	// Oracle returns a correct reply to the prompt for state s, as a
	// perfect model would write it.
	Oracle func(inst task.Instance, s task.State) (string, error)
	// BadReplies must all be refused by Parse (beyond the built-in ones).
	BadReplies []string
	// MaxSteps bounds the run to Done; 0 means the instance's TotalSteps.
	MaxSteps int64
}

// Run runs the conformance suite.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.Task == nil || cfg.Oracle == nil || len(cfg.Params) == 0 {
		t.Fatal("tasktest: Config needs Task, Oracle and at least one Params")
	}
	if cfg.Task.Name() == "" {
		t.Error("Name() is empty")
	}
	for _, raw := range cfg.InvalidParams {
		if _, err := cfg.Task.Bind(raw); err == nil {
			t.Errorf("Bind(%s) accepted invalid params", raw)
		} else if !errors.Is(err, task.ErrInvalidParams) {
			t.Errorf("Bind(%s): error %v does not wrap task.ErrInvalidParams", raw, err)
		}
	}
	for _, raw := range cfg.Params {
		t.Run(string(raw), func(t *testing.T) {
			inst, err := cfg.Task.Bind(raw)
			if err != nil {
				t.Fatalf("Bind(%s): %v", raw, err)
			}
			checkParams(t, cfg.Task, inst)
			checkBadReplies(t, inst, cfg.BadReplies)
			solve(t, cfg, inst)
			checkDraws(t, inst)
			checkConcurrent(t, cfg, inst)
		})
	}
}

// checkParams: Params is canonical; binding it again gives the same.
func checkParams(t *testing.T, tk task.Task, inst task.Instance) {
	t.Helper()
	p := inst.Params()
	if !json.Valid(p) {
		t.Fatalf("Params() is not JSON: %s", p)
	}
	again, err := tk.Bind(p)
	if err != nil {
		t.Fatalf("Bind(Params()) = %v", err)
	}
	if string(again.Params()) != string(p) {
		t.Errorf("Params not canonical: %s then %s", p, again.Params())
	}
	if inst.TotalSteps() < 1 {
		t.Errorf("TotalSteps() = %d, want >= 1", inst.TotalSteps())
	}
}

// checkBadReplies: malformed replies are red flags, never votes.
func checkBadReplies(t *testing.T, inst task.Instance, extra []string) {
	t.Helper()
	s := inst.Initial()
	bad := append([]string{"", " ", "I am not sure.", "\x00\xff", "{}", "[]"}, extra...)
	for _, reply := range bad {
		v, err := inst.Parse(s, reply)
		if err == nil {
			t.Errorf("Parse(%q) accepted a bad reply as %q", reply, v.Key)
			continue
		}
		if !errors.Is(err, task.ErrMalformed) {
			t.Errorf("Parse(%q): error %v does not wrap task.ErrMalformed", reply, err)
		}
	}
}

// solve runs the oracle from Initial to Done, checking every step.
func solve(t *testing.T, cfg Config, inst task.Instance) {
	t.Helper()
	maxSteps := cfg.MaxSteps
	if maxSteps == 0 {
		maxSteps = inst.TotalSteps()
	}
	verifier, _ := inst.(task.Verifier)
	progresser, _ := inst.(task.Progresser)
	referencer, _ := inst.(task.Referencer)
	s := inst.Initial()
	if !json.Valid(s) {
		t.Fatalf("Initial() is not JSON: %s", s)
	}
	last := -1.0
	var step int64
	for ; !inst.Done(s); step++ {
		if step >= maxSteps {
			t.Fatalf("not Done after %d steps", step)
		}
		msgs, err := inst.Prompt(s)
		if err != nil {
			t.Fatalf("step %d: Prompt: %v", step, err)
		}
		if len(msgs) == 0 {
			t.Fatalf("step %d: Prompt returned no messages", step)
		}
		for _, m := range msgs {
			if m.Role != "system" && m.Role != "user" && m.Role != "assistant" {
				t.Fatalf("step %d: message role %q", step, m.Role)
			}
		}
		reply, err := cfg.Oracle(inst, s)
		if err != nil {
			t.Fatalf("step %d: oracle: %v", step, err)
		}
		v, err := inst.Parse(s, reply)
		if err != nil {
			t.Fatalf("step %d: Parse of the oracle's reply: %v\n%s", step, err, reply)
		}
		if v2, _ := inst.Parse(s, reply); v2 != v {
			t.Fatalf("step %d: Parse is not deterministic: %q then %q", step, v.Key, v2.Key)
		}
		if verifier != nil {
			if err := verifier.Verify(s, v); err != nil {
				t.Fatalf("step %d: Verify rejects the oracle's answer: %v", step, err)
			}
		}
		if referencer != nil {
			rv, err := referencer.ReferenceVote(s)
			if err == nil && rv != v {
				t.Fatalf("step %d: ReferenceVote %q, the oracle's answer reads as %q", step, rv.Key, v.Key)
			}
			if err != nil && !errors.Is(err, task.ErrNoReference) {
				t.Fatalf("step %d: ReferenceVote: %v", step, err)
			}
		}
		next, err := inst.Next(s, v)
		if err != nil {
			t.Fatalf("step %d: Next: %v", step, err)
		}
		if !json.Valid(next) {
			t.Fatalf("step %d: Next returned non-JSON %s", step, next)
		}
		if again, _ := inst.Next(s, v); string(again) != string(next) {
			t.Fatalf("step %d: Next is not deterministic", step)
		}
		if progresser != nil {
			p := progresser.Progress(s)
			if p < 0 || p > 1 || p < last {
				t.Fatalf("step %d: Progress %v (previous %v) must rise within [0, 1]", step, p, last)
			}
			last = p
		}
		s = next
	}
	if progresser != nil {
		if p := progresser.Progress(s); p != 1 {
			t.Errorf("Progress at Done = %v, want 1", p)
		}
	}
	if step == 0 {
		t.Error("Initial() is already Done")
	}
}

// checkDraws: a Drawer's states are on the right path: each has a
// reference vote that Verify and Next accept; one that cannot draw says
// so with task.ErrNoReference.
func checkDraws(t *testing.T, inst task.Instance) {
	t.Helper()
	drawer, ok := inst.(task.Drawer)
	if !ok {
		return
	}
	referencer, ok := inst.(task.Referencer)
	if !ok {
		t.Fatal("a Drawer must also be a Referencer: its draws are judged by reference")
	}
	verifier, _ := inst.(task.Verifier)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		s, step, err := drawer.DrawState(rng)
		if errors.Is(err, task.ErrNoReference) {
			return
		}
		if err != nil {
			t.Fatalf("draw %d: DrawState: %v", i, err)
		}
		if step < 0 || step >= inst.TotalSteps() {
			t.Fatalf("draw %d: step %d outside [0, %d)", i, step, inst.TotalSteps())
		}
		v, err := referencer.ReferenceVote(s)
		if err != nil {
			t.Fatalf("draw %d (step %d): ReferenceVote of a drawn state: %v", i, step, err)
		}
		if verifier != nil {
			if err := verifier.Verify(s, v); err != nil {
				t.Fatalf("draw %d (step %d): Verify rejects the reference: %v", i, step, err)
			}
		}
		if _, err := inst.Next(s, v); err != nil {
			t.Fatalf("draw %d (step %d): Next refuses the reference: %v", i, step, err)
		}
	}
}

// checkConcurrent: an instance serves many steps at once.
func checkConcurrent(t *testing.T, cfg Config, inst task.Instance) {
	t.Helper()
	s := inst.Initial()
	reply, err := cfg.Oracle(inst, s)
	if err != nil {
		t.Fatal(err)
	}
	want, err := inst.Parse(s, reply)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if _, err := inst.Prompt(s); err != nil {
					errs <- err
					return
				}
				v, err := inst.Parse(s, reply)
				if err != nil || v != want {
					errs <- fmt.Errorf("concurrent Parse: %q, %v", v.Key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
