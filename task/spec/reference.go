package spec

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/makerfleet/makerfleet/task"
)

var (
	_ task.Referencer = (*Instance)(nil)
	_ task.Drawer     = (*Instance)(nil)
)

// MaxDrawSteps bounds how far along the reference chain DrawState draws:
// steps [0, min(max steps, MaxDrawSteps)).
const MaxDrawSteps = 10_000

// checkpointEvery is how many steps of the reference chain lie between
// two kept states: a draw walks at most this many steps less one, and an
// instance keeps MaxDrawSteps/checkpointEvery states however long the
// chain.
const checkpointEvery = 64

// ReferenceVote implements task.Referencer: the reference answer's vote
// key. A spec without a reference, or whose reference is null for s,
// yields ErrNoReference (which wraps task.ErrNoReference).
func (in *Instance) ReferenceVote(s task.State) (task.Vote, error) {
	key, _, err := in.Reference(s)
	if err != nil {
		return task.Vote{}, err
	}
	return task.Vote{Key: key}, nil
}

// chain is the reference chain from the initial state, walked once up to
// the draw bound: every checkpointEvery-th state is kept.
type chain struct {
	mu     sync.Mutex
	walked bool
	length int64        // states with a reference answer, from step 0
	points []task.State // points[i] is the state at step i·checkpointEvery
	err    error
}

// get walks the chain the first time, and again after a failure that may
// not happen again (a timeout).
func (c *chain) get(walk func() (int64, []task.State, error)) (int64, []task.State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.walked {
		c.length, c.points, c.err = walk()
		c.walked = c.err == nil || lasting(c.err)
	}
	return c.length, c.points, c.err
}

// DrawState implements task.Drawer: a step index drawn uniformly from the
// first steps of the reference chain (Initial, then Next on each reference
// vote) that have a reference answer and are not done, at most
// MaxDrawSteps and max steps, and the state at that step. The chain is
// walked once (its length must be known to draw uniformly); a draw then
// walks from the nearest kept state. A spec without a reference, or whose
// reference is null at the initial state, yields an error wrapping
// task.ErrNoReference.
func (in *Instance) DrawState(rng *rand.Rand) (task.State, int64, error) {
	length, points, err := in.chain.get(func() (int64, []task.State, error) {
		return in.walkChain(min(in.total, MaxDrawSteps))
	})
	if err != nil {
		return nil, 0, err
	}
	step := rng.Int64N(length)
	s := points[step/checkpointEvery]
	for i := step - step%checkpointEvery; i < step; i++ {
		var err error
		if s, err = in.referenceNext(s); err != nil {
			// The same walk succeeded before: only a timeout differs.
			return nil, 0, fmt.Errorf("spec: drawing step %d: %w", step, err)
		}
	}
	return s, step, nil
}

// walkChain follows the reference chain for at most bound steps and
// returns how many states on it can be judged, keeping every
// checkpointEvery-th.
func (in *Instance) walkChain(bound int64) (int64, []task.State, error) {
	s := in.initial
	var points []task.State
	var n int64
	for ; n < bound; n++ {
		if in.Done(s) {
			break
		}
		if _, _, err := in.Reference(s); errors.Is(err, ErrNoReference) {
			break
		} else if err != nil {
			return 0, nil, fmt.Errorf("spec: reference chain at step %d: %w", n, err)
		}
		if n%checkpointEvery == 0 {
			points = append(points, s)
		}
		if n+1 == bound {
			n++ // no need for the state after the last one drawn
			break
		}
		next, err := in.referenceNext(s)
		if err != nil {
			return 0, nil, fmt.Errorf("spec: reference chain at step %d: %w", n, err)
		}
		s = next
	}
	if n == 0 {
		return 0, nil, fmt.Errorf("%w: %s has no reference answer at its initial state, so no step can be drawn", task.ErrNoReference, in.t.spec.Name)
	}
	return n, points, nil
}

// referenceNext is the state after the reference answer from s.
func (in *Instance) referenceNext(s task.State) (task.State, error) {
	v, err := in.ReferenceVote(s)
	if err != nil {
		return nil, err
	}
	return in.Next(s, v)
}

// ReferenceReply is the reply a model answering s rightly writes: the
// reference answer as answer.render writes it. It fails when the spec
// cannot give one, saying why, for the spec's author: no reference for s
// (ErrNoReference), a reference or render that fails (task.ErrEval), or
// a reference answer the spec's own answer rules (schema, red flags,
// vote) refuse (task.ErrMalformed). The simulated model answers with it;
// `maker task test` checks it first.
func (in *Instance) ReferenceReply(s task.State) (key, reply string, err error) {
	key, answer, err := in.Reference(s)
	if err != nil {
		if errors.Is(err, task.ErrNoReference) {
			return "", "", err
		}
		return "", "", fmt.Errorf("the spec's reference fails for this state: %w", err)
	}
	if reply, err = in.Render(s, answer); err != nil {
		return "", "", fmt.Errorf("the spec's answer.render fails for its reference answer: %w", err)
	}
	v, err := in.Parse(s, reply)
	if err != nil {
		return "", "", fmt.Errorf("the spec's own answer rules refuse its reference answer %s: %w", clipQuote(reply, 200), err)
	}
	if v.Key != key {
		return "", "", fmt.Errorf("%w: the spec's reference answer, as answer.render writes it (%s), reads back as another vote (%s, not %s): render and regex disagree",
			task.ErrMalformed, clipQuote(reply, 200), clipQuote(v.Key, 200), clipQuote(key, 200))
	}
	return key, reply, nil
}

// clipQuote quotes s, at most n bytes of it.
func clipQuote(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "..."
	}
	return strconv.Quote(s)
}

// WrongReplies are the replies a model answering s wrongly writes: the
// spec's wrong answers (or alterations of the reference) as answer.render
// writes them, only those the task reads as a vote other than rightKey,
// each vote once. Wrong may alter the reference past the answer schema
// or into a red flag (a malformed reply, not a wrong one), and may list
// a vote twice. Empty when the spec can make none: a simulated model
// then answers every step rightly, whatever its accuracy.
func (in *Instance) WrongReplies(s task.State, rightKey string) []string {
	wrong, _ := in.Wrong(s)
	seen := map[string]bool{rightKey: true}
	var out []string
	for _, w := range wrong {
		r, err := in.Render(s, w)
		if err != nil {
			continue
		}
		if v, err := in.Parse(s, r); err == nil && !seen[v.Key] {
			seen[v.Key] = true
			out = append(out, r)
		}
	}
	return out
}
