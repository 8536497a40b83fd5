package coordinator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/spec"
	"github.com/makerfleet/makerfleet/voter"
)

// countingSpec is the spec task the fleet tests below edit: count from 0
// to params.n, one step each; the answer is {"next": <the next number>},
// and the reference answer (what the simulated model answers from) is the
// right one.
const countingSpec = `name: counting
version: "1"
params:
  type: object
  properties:
    n: {type: integer, minimum: 1, maximum: 100}
    words: {type: array, items: {type: string}}
  required: [n]
  additionalProperties: false
initial: '{"i": 0}'
max_steps: params.n
prompt:
  user: 'You are at {{.state.i}}. Say {"next": <one more>}.'
answer:
  format: json
  schema:
    type: object
    properties: {next: {type: integer}}
    required: [next]
    additionalProperties: false
next: {expr: '{"i": answer.next}'}
done: state.i == params.n
reference: '{"next": state.i + 1}'
`

// specFleet is a fleet running spec tasks: a coordinator and a voter,
// each logging into a buffer of its own.
type specFleet struct {
	env        *fleettest.Env
	voter      *fleettest.Voter
	clog, vlog *lineBuffer
}

// newSpecFleet starts the fleet's coordinator; a voter comes next.
func newSpecFleet(t *testing.T) *specFleet {
	t.Helper()
	f := &specFleet{env: fleettest.New(t), clog: &lineBuffer{}, vlog: &lineBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range f.clog.Lines() {
				t.Logf("coordinator: %s", l)
			}
		}
	})
	f.env.StartCoordinator(coordinator.Config{Logger: slog.New(slog.NewTextHandler(f.clog, nil))})
	return f
}

// startSimVoter starts the voter on the simulated model, which answers
// spec steps from their reference answer (told which step by the voter's
// hints, and which spec by the fleet's task registry).
func (f *specFleet) startSimVoter(t *testing.T, sim simllm.Config) {
	t.Helper()
	sim.Tasks = f.env.Fleet.Registry
	rn := fleettest.StartSim(t, sim)
	f.startVoter(fleettest.SimClient(t, rn, llm.Config{}), true)
}

func (f *specFleet) startVoter(m voter.Model, hints bool) {
	f.voter = f.env.StartVoter(m, voter.Config{SimHints: hints, Concurrency: 8, Logger: slog.New(slog.NewTextHandler(f.vlog, nil))})
}

// job registers the spec src in the fleet's task registry and returns a
// job of it with params and k, not yet submitted.
func (f *specFleet) job(t testing.TB, src, params string, k int) schemas.JobSpec {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, _, err := f.env.Fleet.Registry.Register(ctx, []byte(src), "test")
	if err != nil {
		t.Fatal(err)
	}
	return schemas.JobSpec{
		Header: schemas.NewHeader(schemas.KindJobSpec), JobID: jobs.NewJobID(), Tenant: schemas.DefaultTenant,
		Task: rec.Name, TaskVersion: rec.TaskVersion, Params: json.RawMessage(params), K: k, Seed: 7,
	}
}

// noPanics fails the test if any role logged a panic.
func (f *specFleet) noPanics(t *testing.T) {
	t.Helper()
	for role, buf := range map[string]*lineBuffer{"coordinator": f.clog, "voter": f.vlog} {
		for _, l := range buf.Lines() {
			if bytes.Contains(bytes.ToLower(l), []byte("panic")) {
				t.Errorf("%s logged a panic: %s", role, l)
			}
		}
	}
}

// firstFailure walks in's reference answers from its initial state and
// returns the step at which the task's own logic first fails, and how.
func firstFailure(t *testing.T, in task.Instance) (int64, error) {
	t.Helper()
	si := in.(*spec.Instance)
	st := in.Initial()
	for step := int64(0); step < in.TotalSteps(); step++ {
		done, err := si.DoneErr(st)
		if err != nil {
			return step, err
		}
		if done {
			break
		}
		if _, err := in.Prompt(st); err != nil {
			return step, err
		}
		key, _, err := si.Reference(st)
		if err != nil {
			t.Fatalf("step %d: reference: %v", step, err)
		}
		if st, err = in.Next(st, task.Vote{Key: key}); err != nil {
			return step, err
		}
	}
	t.Fatal("the spec never fails")
	return 0, nil
}

// TestSpecFailsAtStep: a job of a spec task (compiled from YAML and
// registered in the fleet's task registry) whose template or expression
// fails for one state, on the whole fleet (real NATS and redis-server,
// the simulated model answering every step right). The job ends failed at
// that step, promptly (no sample timeout waited for), with a report
// naming the step and the expression; the journal holds each step before
// it decided exactly once, and the end; no sample is published for a step
// whose prompt or done check fails, nothing past the failing step; no
// voter drops a request and no role panics.
func TestSpecFailsAtStep(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		old, new  string // the edit of countingSpec
		params    string
		at        int64
		published bool     // samples are published for the failing step
		reason    []string // in the report's reason, beside the step
	}{
		{
			"next divides by zero at 3",
			`next: {expr: '{"i": answer.next}'}`, `next: {expr: '{"i": answer.next + 0 / (3 - state.i)}'}`,
			`{"n": 6}`, 3, true, []string{"next (", "division by zero"},
		},
		{
			"prompt indexes out of range at 3",
			`user: 'You are at`, `user: 'Word {{index .params.words .state.i}}. You are at`,
			`{"n": 6, "words": ["one", "two", "three"]}`, 3, false, []string{"prompt.user", "index out of range"},
		},
		{
			"done divides by zero at 4",
			`done: state.i == params.n`, `done: state.i == params.n || 12 / (4 - state.i) == 0`,
			`{"n": 6}`, 4, false, []string{"done (", "division by zero"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := strings.Replace(countingSpec, tc.old, tc.new, 1)
			if src == countingSpec {
				t.Fatalf("%q is not in the spec", tc.old)
			}
			// The spec fails for the chosen state, and nowhere before it.
			tk, err := spec.Compile([]byte(src))
			if err != nil {
				t.Fatal(err)
			}
			in, err := tk.Bind(json.RawMessage(tc.params))
			if err != nil {
				t.Fatal(err)
			}
			if at, err := firstFailure(t, in); at != tc.at || !strings.Contains(err.Error(), tc.reason[0]) {
				t.Fatalf("the spec fails at step %d (%v), want step %d", at, err, tc.at)
			}

			const k = 2
			f := newSpecFleet(t)
			f.startSimVoter(t, simllm.Config{Accuracy: 1})
			js := f.job(t, src, tc.params, k)
			requests := fleettest.Capture[schemas.SampleRequest](f.env, bus.DefaultNamespace.SampleSubject(js.Tenant, js.JobID))
			f.env.Submit(&js)
			rep := f.env.WaitFor(js, 20*time.Second)

			if rep.State != schemas.StateFailed || rep.Solved || rep.Steps != tc.at {
				t.Fatalf("state %s (solved %v) after %d steps, reason %q; want failed after %d", rep.State, rep.Solved, rep.Steps, rep.Reason, tc.at)
			}
			for _, want := range append([]string{fmt.Sprintf("the task failed at step %d: ", tc.at)}, tc.reason...) {
				if !strings.Contains(rep.Reason, want) {
					t.Errorf("reason %q does not say %q", rep.Reason, want)
				}
			}
			t.Logf("reason: %s", rep.Reason)
			if rep.Errors != 0 {
				t.Errorf("%d wrong steps decided, want none", rep.Errors)
			}
			checkCounters(t, rep)
			checkFinalStatus(t, f.env, rep)

			// The journal: the steps before, each decided once, then the
			// end, as the report says.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var decided []int64
			var ends []schemas.JournalEntry
			err = journal.ReadAll(ctx, f.env.JS, bus.DefaultNamespace, js.Tenant, js.JobID, func(e journal.Entry) error {
				switch e.Type {
				case schemas.EntryDecision, schemas.EntryArbiter:
					decided = append(decided, e.Step)
				case schemas.EntryEnd:
					ends = append(ends, e.JournalEntry)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := make([]int64, tc.at)
			for i := range want {
				want[i] = int64(i)
			}
			if !slices.Equal(decided, want) {
				t.Errorf("journal decides steps %v, want %v", decided, want)
			}
			if len(ends) != 1 || ends[0].State != schemas.StateFailed || ends[0].Reason != rep.Reason || ends[0].Step != tc.at {
				t.Errorf("journal ends %+v, want one end: failed at step %d, %q", ends, tc.at, rep.Reason)
			}

			// The samples: none past the failing step; at it, only when
			// its prompt and done check could be evaluated.
			atStep := 0
			for _, r := range requests.All() {
				if r.Step > tc.at {
					t.Errorf("request %s published after the failing step", r.SampleID)
				}
				if r.Step == tc.at {
					atStep++
				}
			}
			if tc.published != (atStep > 0) {
				t.Errorf("%d requests for the failing step %d", atStep, tc.at)
			}
			if st := f.voter.Stats(); st.Malformed != 0 || st.RedFlags != 0 {
				t.Errorf("voter stats %+v: a request dropped or answered with a red flag", st)
			}
			f.noPanics(t)
		})
	}
}

// TestSpecRedFlagEvalFails: a red flag expression that fails for some
// answers (it divides by the answer's step, zero for a reply repeating the
// state's number) throws those samples away as red flags of reason "eval",
// like the answers it catches; it does not fail the job. The model (a
// script: the simulated model sends no reply its task red-flags) answers
// each step first with the state's own number (the expression fails),
// then with a number skipped (the red flag catches it), then right: the
// job solves, each step by exactly k votes after exactly one red flag of
// each reason.
func TestSpecRedFlagEvalFails(t *testing.T) {
	t.Parallel()
	src := strings.Replace(countingSpec, "reference:", `red_flags:
  - name: not_one_more
    when: '12 / (answer.next - state.i) != 12'
reference:`, 1)
	if src == countingSpec {
		t.Fatal("no reference in the spec")
	}
	const n, k = 8, 2
	f := newSpecFleet(t)
	f.startVoter(&flagModel{calls: map[int]int{}}, false)
	js := f.job(t, src, fmt.Sprintf(`{"n": %d}`, n), k)
	f.env.Submit(&js)
	rep := f.env.WaitFor(js, 20*time.Second)
	t.Logf("%d samples, %d votes, red flags %v", rep.Samples, rep.Votes, rep.RedFlags)
	if rep.State != schemas.StateSolved || rep.Steps != n || rep.Errors != 0 {
		t.Fatalf("state %s after %d steps with %d wrong, reason %q; want solved in %d", rep.State, rep.Steps, rep.Errors, rep.Reason, n)
	}
	if want := map[string]int64{"eval": n, "not_one_more": n}; !maps.Equal(rep.RedFlags, want) {
		t.Errorf("red flags %v, want %v", rep.RedFlags, want)
	}
	if rep.Votes != n*k || rep.Samples != n*(k+2) {
		t.Errorf("%d samples, %d votes for %d steps; want k=%d votes after 2 red flags a step", rep.Samples, rep.Votes, n, k)
	}
	checkCounters(t, rep)
	checkNoWaste(t, rep)
	f.noPanics(t)
}

// flagModel answers the counting spec's steps, read from the prompt: the
// first reply for a state repeats its number, the second skips one, every
// later one is right.
type flagModel struct {
	mu    sync.Mutex
	calls map[int]int // replies so far, by state
}

var _ voter.Model = (*flagModel)(nil)

func (m *flagModel) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	prompt := req.Messages[len(req.Messages)-1].Content
	var i int
	if _, err := fmt.Sscanf(prompt, "You are at %d.", &i); err != nil {
		return llm.Response{}, fmt.Errorf("%w: prompt %q", llm.ErrPermanent, prompt)
	}
	m.mu.Lock()
	nth := m.calls[i]
	m.calls[i]++
	m.mu.Unlock()
	next := i + 1
	switch nth {
	case 0:
		next = i
	case 1:
		next = i + 2
	}
	return llm.Response{
		Choices:      []llm.Choice{{Content: fmt.Sprintf(`{"next": %d}`, next), FinishReason: "stop"}},
		PromptTokens: 20, CompletionTokens: 5, Model: "flag-1",
	}, nil
}
