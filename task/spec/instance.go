package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/makerfleet/makerfleet/internal/lru"
	"github.com/makerfleet/makerfleet/internal/plainjson"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// MaxSteps bounds what a spec's max_steps may say: 2^40 steps.
const MaxSteps = 1 << 40

// Instance is a spec task bound to a job's params.
type Instance struct {
	t         *Task
	params    any
	paramsRaw json.RawMessage
	total     int64
	expected  int64 // expected_steps, or total
	initial   task.State

	// Recent results, by state: every sample of a step reads the same
	// state, asks the same prompt and mostly gives the same answer; the
	// winner's next state is asked when it is screened and when it is
	// decided; the reference answer when it is verified (and by the
	// simulated model for every sample). Cached values are shared: nothing
	// may change them.
	states  *lru.Cache[string, result[any]]
	prompts *lru.Cache[string, result[[]task.Message]]
	answers *lru.Cache[string, result[string]]
	nexts   *lru.Cache[string, result[task.State]]
	refs    *lru.Cache[string, reference]

	// The system prompt, when it cannot read the state: written once.
	sysOnce sync.Once
	sys     string
	sysErr  error

	// DrawState's walk of the reference chain (reference.go).
	chain chain
}

// reference is the reference answer from one state.
type reference struct {
	key    string
	answer map[string]any
	err    error
}

// maxCacheKey bounds a cache key (a state, with an answer or a vote):
// bigger ones are not cached, so an instance's caches hold a few MB at
// most however large what they are asked about.
const maxCacheKey = 16 << 10

// result is a cached value, or the error making it gave.
type result[V any] struct {
	val V
	err error
}

// once returns key's value from c, made by fill when c has none (and by
// one caller when several ask at once). A key too big to keep is made
// each time.
func once[V any](c *lru.Cache[string, V], key string, fill func() (V, bool)) V {
	if len(key) > maxCacheKey {
		v, _ := fill()
		return v
	}
	return c.Do(key, fill)
}

// lasting says whether a result may be kept: every failure happens again
// the same way except running out of time.
func lasting(err error) bool { return !errors.Is(err, errTimeout) }

var (
	_ task.Instance   = (*Instance)(nil)
	_ task.Verifier   = (*Instance)(nil)
	_ task.Progresser = (*Instance)(nil)
)

// Bind implements task.Task: params must satisfy the spec's params schema;
// the initial state and max steps are computed from them once. The same
// params give the same instance, shared.
func (t *Task) Bind(raw json.RawMessage) (task.Instance, error) {
	r := once(t.bound, string(raw), func() (result[*Instance], bool) {
		in, err := t.bind(raw)
		return result[*Instance]{in, err}, lasting(err)
	})
	if r.err != nil {
		return nil, r.err
	}
	return r.val, nil
}

func (t *Task) bind(raw json.RawMessage) (*Instance, error) {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	v, err := plainjson.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s params are not one JSON value: %v", task.ErrInvalidParams, t.spec.Name, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: %s params must be a JSON object", task.ErrInvalidParams, t.spec.Name)
	}
	if err := t.params.validate(v); err != nil {
		return nil, fmt.Errorf("%w: %s params: %s", task.ErrInvalidParams, t.spec.Name, schemaMessage(err))
	}
	vars := map[string]any{varParams: v}
	withLets(vars, t.lets)
	for _, c := range t.checks {
		refuse, err := c.when.eval("param check "+c.name, vars)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", task.ErrInvalidParams, err)
		}
		if refuse.(bool) {
			return nil, fmt.Errorf("%w: %s params refused by check %s (%s)", task.ErrInvalidParams, t.spec.Name, c.name, c.when.src)
		}
	}
	in := &Instance{t: t, params: v,
		states:  lru.New[string, result[any]](16),
		prompts: lru.New[string, result[[]task.Message]](8),
		answers: lru.New[string, result[string]](64),
		nexts:   lru.New[string, result[task.State]](16),
		refs:    lru.New[string, reference](16),
	}
	if in.paramsRaw, err = plainjson.Marshal(v); err != nil {
		return nil, fmt.Errorf("%w: %v", task.ErrInvalidParams, err)
	}
	st, err := t.initial.eval("initial", vars)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", task.ErrInvalidParams, err)
	}
	if in.initial, err = plainjson.Marshal(st); err != nil {
		return nil, fmt.Errorf("%w: initial: %v", task.ErrInvalidParams, err)
	}
	if len(in.initial) > schemas.MaxStateBytes {
		return nil, fmt.Errorf("%w: the initial state is %d bytes, over the limit of %d (states travel in every sample request: keep fixed inputs in the params, which travel by reference)",
			task.ErrInvalidParams, len(in.initial), schemas.MaxStateBytes)
	}
	n, err := t.maxSteps.eval("max_steps", vars)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", task.ErrInvalidParams, err)
	}
	if in.total = n.(int64); in.total < 1 || in.total > MaxSteps {
		return nil, fmt.Errorf("%w: max_steps is %d for these params, want 1 to %d", task.ErrInvalidParams, in.total, int64(MaxSteps))
	}
	in.expected = in.total
	if t.expected != nil {
		e, err := t.expected.eval("expected_steps", vars)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", task.ErrInvalidParams, err)
		}
		if in.expected = e.(int64); in.expected < 1 || in.expected > in.total {
			return nil, fmt.Errorf("%w: expected_steps is %d for these params, want 1 to max_steps (%d)", task.ErrInvalidParams, in.expected, in.total)
		}
	}
	return in, nil
}

// Task returns the compiled spec the instance is bound from.
func (in *Instance) Task() *Task { return in.t }

// Params implements task.Instance.
func (in *Instance) Params() json.RawMessage { return in.paramsRaw }

// Initial implements task.Instance.
func (in *Instance) Initial() task.State { return in.initial }

// ExpectedSteps implements task.StepsEstimator: expected_steps, or
// max_steps.
func (in *Instance) ExpectedSteps() int64 { return in.expected }

// TotalSteps implements task.Instance.
func (in *Instance) TotalSteps() int64 { return in.total }

// state decodes s (cached). Decoded values are shared: nothing may change
// them.
func (in *Instance) state(s task.State) (any, error) {
	r := once(in.states, string(s), func() (result[any], bool) {
		v, err := plainjson.Decode(s)
		if err != nil {
			err = fmt.Errorf("%w: %v", task.ErrInvalidState, err)
		}
		return result[any]{v, err}, true
	})
	return r.val, r.err
}

// vars are the expression variables from s: params, state and, when
// answer is not nil, answer.
func (in *Instance) vars(s task.State, answer map[string]any) (map[string]any, error) {
	st, err := in.state(s)
	if err != nil {
		return nil, err
	}
	vars := map[string]any{varParams: in.params, varState: st}
	if answer != nil {
		vars[varAnswer] = answer
	}
	withLets(vars, in.t.lets)
	return vars, nil
}

// Prompt implements task.Instance.
func (in *Instance) Prompt(s task.State) ([]task.Message, error) {
	r := once(in.prompts, string(s), func() (result[[]task.Message], bool) {
		p, err := in.prompt(s)
		return result[[]task.Message]{p, err}, true
	})
	// A copy each time: the caller owns what it is given.
	return slices.Clone(r.val), r.err
}

func (in *Instance) prompt(s task.State) ([]task.Message, error) {
	st, err := in.state(s)
	if err != nil {
		return nil, err
	}
	data := map[string]any{varState: st, varParams: in.params}
	var msgs []task.Message
	if in.t.system != nil {
		var sys string
		if in.t.system.stateFree {
			in.sysOnce.Do(func() { in.sys, in.sysErr = in.t.system.render(data) })
			sys, err = in.sys, in.sysErr
		} else {
			sys, err = in.t.system.render(data)
		}
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, task.Message{Role: "system", Content: sys})
	}
	user, err := in.t.user.render(data)
	if err != nil {
		return nil, err
	}
	return append(msgs, task.Message{Role: "user", Content: user}), nil
}

// Parse implements task.Instance: the answer is read strictly (format,
// then the answer schema, then the red flags); anything else is a red
// flag, never repaired.
func (in *Instance) Parse(s task.State, reply string) (task.Vote, error) {
	obj, err := in.t.reader.read(reply)
	if err != nil {
		return task.Vote{}, err
	}
	// The same answer from the same state is judged once.
	canon, err := plainjson.Marshal(obj)
	if err != nil {
		return task.Vote{}, fmt.Errorf("%w: %v", task.ErrMalformed, err)
	}
	r := once(in.answers, string(s)+"\x00"+string(canon), func() (result[string], bool) {
		key, err := in.judge(s, obj)
		return result[string]{key, err}, lasting(err)
	})
	return task.Vote{Key: r.val}, r.err
}

// judge checks an answer read from a reply from s (schema, red flags) and
// returns its vote key.
func (in *Instance) judge(s task.State, obj map[string]any) (string, error) {
	if err := checkAnswer(in.t.answer, obj); err != nil {
		return "", err
	}
	if len(in.t.redFlags) > 0 {
		vars, err := in.vars(s, obj)
		if err != nil {
			return "", err
		}
		for _, rf := range in.t.redFlags {
			hit, err := rf.when.eval("red flag "+rf.name, vars)
			if err != nil {
				// An answer this expression cannot judge is not a vote.
				return "", &evalFlag{RedFlag: task.RedFlag{Reason: "eval", Detail: err.Error()}, err: err}
			}
			if hit.(bool) {
				return "", &task.RedFlag{Reason: rf.name, Detail: rf.when.src}
			}
		}
	}
	return in.t.voteKey(obj)
}

// evalFlag is the red flag for an answer a red flag expression could not
// judge; it keeps the expression's error for lasting.
type evalFlag struct {
	task.RedFlag
	err error
}

func (e *evalFlag) Unwrap() []error { return []error{&e.RedFlag, e.err} }

// Next implements task.Instance: the next state is the winner's own
// answer field, or the next expression over the winner's vote fields. A
// key that is not the canonical form Parse writes is malformed.
func (in *Instance) Next(s task.State, v task.Vote) (task.State, error) {
	r := once(in.nexts, string(s)+"\x00"+v.Key, func() (result[task.State], bool) {
		next, err := in.next(s, v)
		return result[task.State]{next, err}, lasting(err)
	})
	return r.val, r.err
}

func (in *Instance) next(s task.State, v task.Vote) (task.State, error) {
	obj, err := in.voteObject(v.Key)
	if err != nil {
		return nil, err
	}
	var next any
	if f := in.t.spec.Next.Field; f != "" {
		var ok bool
		if next, ok = obj[f]; !ok {
			return nil, fmt.Errorf("%w: the vote has no %q", task.ErrMalformed, f)
		}
	} else {
		vars, err := in.vars(s, obj)
		if err != nil {
			return nil, err
		}
		if next, err = in.t.next.eval("next", vars); err != nil {
			return nil, err
		}
	}
	out, err := plainjson.Marshal(next)
	if err != nil {
		return nil, fmt.Errorf("%w: next state: %v", task.ErrEval, err)
	}
	if len(out) > schemas.MaxStateBytes {
		return nil, fmt.Errorf("%w: next state is %d bytes, over the limit of %d (states travel in every sample request: keep fixed inputs in the params)",
			task.ErrEval, len(out), schemas.MaxStateBytes)
	}
	return out, nil
}

// voteObject reads a vote key back: a JSON object of exactly the vote
// fields, in canonical form.
func (in *Instance) voteObject(key string) (map[string]any, error) {
	v, err := plainjson.Decode([]byte(key))
	if err != nil {
		return nil, fmt.Errorf("%w: vote key: %v", task.ErrMalformed, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: vote key is not an object", task.ErrMalformed)
	}
	if vote := in.t.vote; len(vote) > 0 {
		if len(obj) != len(vote) {
			return nil, fmt.Errorf("%w: vote key has %d fields, want %v", task.ErrMalformed, len(obj), vote)
		}
		for _, f := range vote {
			if _, ok := obj[f]; !ok {
				return nil, fmt.Errorf("%w: vote key has no %q", task.ErrMalformed, f)
			}
		}
	} else if err := checkAnswer(in.t.answer, obj); err != nil {
		return nil, err
	}
	if c, err := plainjson.Marshal(obj); err != nil || string(c) != key {
		return nil, fmt.Errorf("%w: vote key is not canonical (want %s)", task.ErrMalformed, c)
	}
	return obj, nil
}

// Done implements task.Instance. A state the done expression cannot judge
// is not the goal.
func (in *Instance) Done(s task.State) bool {
	ok, err := in.DoneErr(s)
	return err == nil && ok
}

// DoneErr is Done with the expression's error.
func (in *Instance) DoneErr(s task.State) (bool, error) {
	vars, err := in.vars(s, nil)
	if err != nil {
		return false, err
	}
	v, err := in.t.done.eval("done", vars)
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}

// ErrNoReference: the spec says no right answer for this state. It wraps
// task.ErrNoReference.
var ErrNoReference = fmt.Errorf("spec: %w for this state", task.ErrNoReference)

// Reference returns the right answer from s (its vote key and the whole
// answer): ErrNoReference when the spec has no reference expression, or it
// gives null for s. The answer is shared: nothing may change it.
func (in *Instance) Reference(s task.State) (key string, answer map[string]any, err error) {
	if in.t.ref == nil {
		return "", nil, ErrNoReference
	}
	r := once(in.refs, string(s), func() (reference, bool) {
		key, answer, err := in.reference(s)
		return reference{key, answer, err}, lasting(err)
	})
	return r.key, r.answer, r.err
}

func (in *Instance) reference(s task.State) (key string, answer map[string]any, err error) {
	vars, err := in.vars(s, nil)
	if err != nil {
		return "", nil, err
	}
	v, err := in.t.ref.eval("reference", vars)
	if err != nil {
		return "", nil, err
	}
	if v == nil {
		return "", nil, ErrNoReference
	}
	answer, ok := v.(map[string]any)
	if !ok {
		return "", nil, fmt.Errorf("%w: reference gave %s, want an object or null", task.ErrEval, describeValue(v))
	}
	if key, err = in.t.voteKey(answer); err != nil {
		return "", nil, fmt.Errorf("%w: reference: %v", task.ErrEval, err)
	}
	return key, answer, nil
}

// Verify implements task.Verifier: the decided vote must be the reference
// answer's. Where there is no reference nothing is wrong.
func (in *Instance) Verify(s task.State, v task.Vote) error {
	want, _, err := in.Reference(s)
	if errors.Is(err, ErrNoReference) {
		return nil
	}
	if err != nil {
		return err
	}
	if v.Key != want {
		return fmt.Errorf("%w: decided %s, the reference says %s", task.ErrWrongStep, v.Key, want)
	}
	return nil
}

// Progress implements task.Progresser: the progress expression, else 0
// (the fleet then shows steps over max steps).
func (in *Instance) Progress(s task.State) float64 {
	if in.t.progress == nil {
		return 0
	}
	vars, err := in.vars(s, nil)
	if err != nil {
		return 0
	}
	v, err := in.t.progress.eval("progress", vars)
	if err != nil {
		return 0
	}
	f := toFloat(v)
	if math.IsNaN(f) {
		return 0
	}
	return min(max(f, 0), 1)
}

// Result implements task.Resulter: the result expression at s, as
// canonical JSON; ErrNoResult without one.
func (in *Instance) Result(s task.State) (json.RawMessage, error) {
	if in.t.result == nil {
		return nil, task.ErrNoResult
	}
	vars, err := in.vars(s, nil)
	if err != nil {
		return nil, err
	}
	v, err := in.t.result.eval("result", vars)
	if err != nil {
		return nil, err
	}
	out, err := toJSON(v)
	if err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	return json.RawMessage(out), nil
}

// HasProgress reports whether the spec measures progress itself.
func (in *Instance) HasProgress() bool { return in.t.progress != nil }

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	}
	return math.NaN()
}

// Wrong returns wrong but well-formed answers from s: the spec's wrong
// expression, else alterations of the reference answer's fields; only
// answers that would be votes (schema and red flags pass them), each vote
// once, never the reference's own.
func (in *Instance) Wrong(s task.State) ([]map[string]any, error) {
	right, ref, err := in.Reference(s)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	if in.t.wrong != nil {
		vars, err := in.vars(s, nil)
		if err != nil {
			return nil, err
		}
		v, err := in.t.wrong.eval("wrong", vars)
		if err != nil {
			return nil, err
		}
		for _, e := range v.([]any) {
			if obj, ok := e.(map[string]any); ok {
				out = append(out, obj)
			}
		}
	} else {
		out = alter(ref, in.t.vote)
	}
	// Keep the ones a reply could be a vote for (the answer schema and the
	// red flags pass them), each candidate once, none the right one.
	seen := map[string]bool{right: true}
	return slices.DeleteFunc(out, func(a map[string]any) bool {
		k, err := in.judge(s, a)
		if err != nil || seen[k] {
			return true
		}
		seen[k] = true
		return false
	}), nil
}

// alter makes wrong answers from a right one: each vote field's numbers
// moved by one up and down, strings with a letter added, bools flipped.
func alter(ref map[string]any, vote []string) []map[string]any {
	fields := vote
	if len(fields) == 0 {
		for k := range ref {
			fields = append(fields, k)
		}
		slices.Sort(fields)
	}
	var out []map[string]any
	for _, f := range fields {
		for _, d := range []int64{1, -1, 2} {
			v, ok := shift(ref[f], d)
			if !ok {
				continue
			}
			a := make(map[string]any, len(ref))
			for k, x := range ref {
				a[k] = x
			}
			a[f] = v
			out = append(out, a)
		}
	}
	return out
}

// shift moves every number in v by d (the first one only for lists and
// objects, which keeps them close to the right answer).
func shift(v any, d int64) (any, bool) {
	switch x := v.(type) {
	case int64:
		return x + d, true
	case float64:
		return x + float64(d), true
	case string:
		return x + string(rune('a'+d+1)), true
	case bool:
		return !x, d == 1
	case []any:
		for i, e := range x {
			if s, ok := shift(e, d); ok {
				c := slices.Clone(x)
				c[i] = s
				return c, true
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if s, ok := shift(x[k], d); ok {
				c := make(map[string]any, len(x))
				for kk, vv := range x {
					c[kk] = vv
				}
				c[k] = s
				return c, true
			}
		}
	}
	return nil, false
}

// Render writes answer as a reply, as the model would: the answer's render
// template, else its JSON.
func (in *Instance) Render(s task.State, answer map[string]any) (string, error) {
	if in.t.render == nil {
		b, err := plainjson.Marshal(answer)
		return string(b), err
	}
	st, err := in.state(s)
	if err != nil {
		return "", err
	}
	return in.t.render.render(map[string]any{varParams: in.params, varState: st, varAnswer: answer})
}
