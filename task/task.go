// Package task is the public interface between MAKER voting and a problem.
//
// A task turns a problem into one-decision steps. For each step the fleet asks
// a model for the next decision (Prompt), reads the reply with a strict parser
// (Parse) that yields a canonical Vote, and, once a vote wins by margin k,
// moves on from the winner's own answer (Next). A task never repairs model
// output: a reply Parse rejects is red-flagged and thrown away.
//
// States travel on the wire between the coordinator and the voters, so a
// State is canonical JSON: equal states have equal bytes.
//
// A task may also implement Verifier to report wrong steps after the fact
// (the fleet counts them, it never uses them to correct a decision),
// Progresser to say how far a state is along the task, Referencer to say the
// right vote from a state and Drawer to draw a random state on the right path
// (calibration and speculation use these two).
package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
)

// State is a task state in canonical JSON.
type State = json.RawMessage

// Message is one chat message of a step's prompt.
type Message struct {
	Role    string // "system" or "user"
	Content string
}

// Vote is a parsed model answer. Key is the answer's canonical form: two
// replies are votes for the same candidate exactly when their keys are equal.
// For tasks whose answer carries the next state, Key includes it, so the same
// move with a different next state is a different candidate.
type Vote struct {
	Key string
}

// Task is a kind of problem, registered by name.
type Task interface {
	// Name is the registry name, e.g. "hanoi".
	Name() string
	// Bind validates params (task-specific JSON) and returns the instance
	// they describe. Invalid params yield an error wrapping ErrInvalidParams.
	Bind(params json.RawMessage) (Instance, error)
}

// Instance is a task bound to its parameters. Implementations must be safe
// for concurrent use: one instance serves many steps at once.
type Instance interface {
	// Params returns the canonical form of the parameters.
	Params() json.RawMessage
	// Initial returns the state before the first step.
	Initial() State
	// TotalSteps is the most steps a run may take; a run that is not Done
	// after that many decided steps ends unsolved.
	TotalSteps() int64
	// Prompt returns the messages that ask for the step taken from s. The
	// prompt holds only what the step needs, never the run's history.
	Prompt(s State) ([]Message, error)
	// Parse strictly reads a model reply to the prompt for s. A reply it
	// cannot read yields an error wrapping ErrMalformed: a red flag.
	Parse(s State, reply string) (Vote, error)
	// Next returns the state after the winning vote v was decided from s.
	// It takes the state from the vote itself, never recomputes it. A key
	// Parse could not have produced (unreadable, or not canonical) yields
	// an error wrapping ErrMalformed: the coordinator checks every vote it
	// receives this way before counting it.
	Next(s State, v Vote) (State, error)
	// Done reports whether s is a goal state.
	Done(s State) bool
}

// Verifier is implemented by instances that can check a decided step.
// Verify returns nil when v is the right decision from s, and an error
// wrapping ErrWrongStep (with a reason) when it is not.
type Verifier interface {
	Verify(s State, v Vote) error
}

// DoneChecker is implemented by instances whose Done can fail (a spec's
// expression): DoneErr says why, where Done only says "not done".
type DoneChecker interface {
	DoneErr(s State) (bool, error)
}

// Referencer is implemented by instances that know the right vote from a state
// (a solver, a spec's reference). Calibration judges samples with it; speculation
// uses it to guess the next state before a step is decided.
type Referencer interface {
	// ReferenceVote returns the right vote from s; an error wrapping
	// ErrNoReference when the instance has none for s.
	ReferenceVote(s State) (Vote, error)
}

// Drawer is implemented by instances that can draw a random state reachable on the
// right path, and say which step it is (calibration's random steps).
type Drawer interface {
	// DrawState returns a state on the right path and its step index (the
	// number of right steps from Initial to it), drawn with rng. An
	// instance that cannot draw (a spec without a reference) returns an
	// error wrapping ErrNoReference.
	DrawState(rng *rand.Rand) (s State, step int64, err error)
}

// StepsEstimator is implemented by instances whose jobs usually take far
// fewer steps than TotalSteps, a bound (a loop that ends when its
// program halts): ExpectedSteps is what planning counts on.
type StepsEstimator interface {
	// ExpectedSteps is the steps a job is expected to take, in
	// [1, TotalSteps].
	ExpectedSteps() int64
}

// PlannedSteps is the steps to plan a job of inst for (its k, its cost,
// its progress): ExpectedSteps when inst gives it, else TotalSteps.
func PlannedSteps(inst Instance) int64 {
	if e, ok := inst.(StepsEstimator); ok {
		if n := e.ExpectedSteps(); n >= 1 && n <= inst.TotalSteps() {
			return n
		}
	}
	return inst.TotalSteps()
}

// Resulter is implemented by instances whose answer is not their final
// state as it stands (a spec's result expression): the report shows it.
type Resulter interface {
	// Result is the task's answer at s, the state a solved job ended at,
	// as JSON; an error wrapping ErrNoResult when the instance has none.
	Result(s State) (json.RawMessage, error)
}

// Progresser is implemented by instances that can tell how far a state is
// along the task; job status shows it. Without it, progress is decided
// steps over TotalSteps.
type Progresser interface {
	// Progress returns the share of the task done at s, in [0, 1].
	Progress(s State) float64
}

// Spec is a task compiled from a registered spec file (package
// task/spec): a task with a version and the hash of its source.
type Spec interface {
	Task
	Version() string
	// Hash is "sha256:" and the hex SHA-256 of the source.
	Hash() string
}

// Compiler compiles a spec file's source (task/spec.CompileSpec). The
// fleet's task registry takes one from the programs that load specs, so
// that a program that only pins them (the public client) links no spec
// language.
type Compiler func(src []byte) (Spec, error)

// Sentinel errors.
var (
	ErrUnknownTask   = errors.New("task: unknown task")
	ErrInvalidParams = errors.New("task: invalid params")
	ErrMalformed     = errors.New("task: malformed answer")
	ErrInvalidState  = errors.New("task: invalid state")
	ErrWrongStep     = errors.New("task: wrong step")
	// ErrEval: the task's own logic failed for a state (a spec's
	// expression or template): not the model's fault, and not one that
	// trying again fixes.
	ErrEval = errors.New("task: evaluation failed")
	// ErrNoReference: the instance cannot say the right answer (a spec
	// without a reference), so nothing can be judged or drawn with it.
	ErrNoReference = errors.New("task: no reference answer")
	// ErrNoResult: the instance has no result of its own (its final
	// state is the answer).
	ErrNoResult = errors.New("task: no result expression")
)

// RedFlag is a Parse error that names its own reason (a spec's red flag,
// "illegal_move" say) instead of the generic "parse". It matches
// ErrMalformed.
type RedFlag struct {
	// Reason is the red flag's name, as reports count it.
	Reason string
	// Detail says what was wrong.
	Detail string
}

func (r *RedFlag) Error() string { return "task: red flag " + r.Reason + ": " + r.Detail }

// Is makes errors.Is(err, ErrMalformed) hold.
func (r *RedFlag) Is(target error) bool { return target == ErrMalformed }

// Ref names a task exactly: a built-in task by its name; a spec task by
// its name, version and the content hash of the spec a job pinned.
type Ref struct {
	Name    string
	Version string
	Hash    string
}

// String is the name, or name@version.
func (r Ref) String() string {
	if r.Version == "" {
		return r.Name
	}
	return r.Name + "@" + r.Version
}

// Source finds the task a reference names. *Registry is the source of the
// built-in tasks; the fleet's task registry adds registered specs.
type Source interface {
	Task(ctx context.Context, ref Ref) (Task, error)
}

var _ Source = (*Registry)(nil)

// BindRef finds ref's task in src and binds params.
func BindRef(ctx context.Context, src Source, ref Ref, params json.RawMessage) (Instance, error) {
	t, err := src.Task(ctx, ref)
	if err != nil {
		return nil, err
	}
	return t.Bind(params)
}

// Registry maps task names to tasks. The zero value is empty; it is safe
// for concurrent reads once built.
type Registry struct {
	tasks map[string]Task
}

// NewRegistry returns a registry holding ts. A later task with the same name
// replaces an earlier one.
func NewRegistry(ts ...Task) *Registry {
	r := &Registry{tasks: make(map[string]Task, len(ts))}
	for _, t := range ts {
		r.tasks[t.Name()] = t
	}
	return r
}

// Lookup returns the task called name.
func (r *Registry) Lookup(name string) (Task, error) {
	if t, ok := r.tasks[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownTask, name, r.Names())
}

// Task implements Source: built-in tasks have no versions.
func (r *Registry) Task(_ context.Context, ref Ref) (Task, error) {
	if ref.Version != "" || ref.Hash != "" {
		return nil, fmt.Errorf("%w %q: built-in tasks have no versions", ErrUnknownTask, ref.String())
	}
	return r.Lookup(ref.Name)
}

// Bind looks up name and binds params.
func (r *Registry) Bind(name string, params json.RawMessage) (Instance, error) {
	t, err := r.Lookup(name)
	if err != nil {
		return nil, err
	}
	return t.Bind(params)
}

// Names returns the registered task names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.tasks))
	for n := range r.tasks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
