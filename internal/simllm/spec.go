package simllm

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/lru"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/spec"
)

// A task spec's step: a request whose hints (llm.SimHint, sent by a voter
// told to) name a task spec is answered from the spec's reference answer,
// written as the spec's render template writes it; wrong answers are the
// spec's wrong ones (or alterations of the reference), malformed ones are
// prose with no answer in it.

// specStep is a recognised spec step: the right answer's reply and the
// wrong answers' replies.
type specStep struct {
	right string
	wrong []string
}

// specs caches bound spec instances by hash and params, and the steps
// recently answered: every sample of a step asks for the same one.
type specs struct {
	src    task.Source
	inputs Inputs
	in     *lru.Cache[string, *spec.Instance]
	steps  *lru.Cache[string, *specStep]
}

func newSpecs(src task.Source, in Inputs) *specs {
	return &specs{src: src, inputs: in, in: lru.New[string, *spec.Instance](256), steps: lru.New[string, *specStep](64)}
}

// step returns the step h names, or why the model cannot answer it: the
// task is unknown or not a spec, its params cannot be read, or the
// spec's own reference fails for the state. The reason is the reply's
// text, so that the job that asked can say why its samples are red flags.
func (sp *specs) step(h llm.SimHint) (*specStep, string) {
	if sp == nil || sp.src == nil {
		return nil, "this simulated model reads no task specs: start it with --nats URL (a fleet's registered specs) or --task-file FILE"
	}
	key := taskKey(h) + "\x00" + string(h.State)
	if st, ok := sp.steps.Get(key); ok {
		return st, ""
	}
	in, why := sp.instance(h)
	if in == nil {
		return nil, why
	}
	rightKey, right, err := in.ReferenceReply(h.State)
	switch {
	case errors.Is(err, spec.ErrNoReference):
		return nil, "the spec's reference gives no answer (null) for this state, so the simulated model has none to give"
	case err != nil:
		return nil, err.Error()
	}
	st := &specStep{right: right, wrong: in.WrongReplies(h.State, rightKey)}
	sp.steps.Put(key, st)
	return st, ""
}

// taskKey names h's task and params in the caches: the whole reference,
// so a hint whose name or version does not match the hash is looked up,
// not served what another hint found.
func taskKey(h llm.SimHint) string {
	params := h.ParamsRef
	if params == "" {
		params = string(h.Params)
	}
	return h.Task + "\x00" + h.Version + "\x00" + h.Hash + "\x00" + params
}

func (sp *specs) instance(h llm.SimHint) (*spec.Instance, string) {
	key := taskKey(h)
	if in, ok := sp.in.Get(key); ok {
		return in, ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := sp.src.Task(ctx, task.Ref{Name: h.Task, Version: h.Version, Hash: h.Hash})
	if err != nil {
		return nil, "the simulated model cannot read task " + h.Task + "@" + h.Version + ": " + err.Error() +
			" (start it with --nats URL for a fleet's registered specs, or --task-file FILE)"
	}
	st, ok := t.(*spec.Task)
	if !ok {
		return nil, "task " + h.Task + " is not a task spec"
	}
	params := h.Params
	if h.ParamsRef != "" {
		if sp.inputs == nil {
			return nil, "the simulated model cannot read params kept by reference (" + h.ParamsRef + "): start it with --nats URL"
		}
		if params, err = sp.inputs.Get(ctx, h.ParamsRef); err != nil {
			return nil, "the simulated model cannot read the job's params: " + err.Error()
		}
	}
	bound, err := st.Bind(params)
	if err != nil {
		return nil, "the simulated model cannot bind the job's params: " + err.Error()
	}
	in := bound.(*spec.Instance)
	sp.in.Put(key, in)
	return in, ""
}

// generateSpec draws one choice for a spec step, like generate does for a
// Hanoi one.
func generateSpec(rng *rand.Rand, st *specStep, pEff, overlongRate, malformedRate float64, spread, limit int) choice {
	var b strings.Builder
	out := outCorrect
	u := rng.Float64()
	switch {
	case u < overlongRate:
		// Rambles to the limit, the right answer buried in it: the red
		// flag must catch it, not the parser.
		if limit <= 0 {
			limit = OverlongTokens
		}
		b.WriteString(st.right)
		for b.Len() < limit*4 {
			b.WriteString(" Let me double-check that once more before I commit to it.")
		}
		text := b.String()[:limit*4]
		return choice{content: text, finish: "length", tokens: limit, outcome: outOverlong}
	case u < overlongRate+malformedRate:
		out = outMalformed
		b.WriteString(pick(rng, []string{
			"I am not certain about this step; I would rather not guess.",
			"This needs more context than I have.",
			"Working through it, the answer depends on details I cannot see.",
		}))
	case rng.Float64() < pEff || len(st.wrong) == 0:
		b.WriteString(st.right)
	default:
		out = outWrong
		n := len(st.wrong)
		if spread > 0 && spread < n {
			n = spread
		}
		b.WriteString(st.wrong[rng.IntN(n)])
	}
	text := b.String()
	tokens := tokenCount(text)
	if limit > 0 && tokens > limit {
		return choice{content: text[:limit*4], finish: "length", tokens: limit, outcome: outOverlong}
	}
	return choice{content: text, finish: "stop", tokens: tokens, outcome: out}
}
