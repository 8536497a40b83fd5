package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/voter"
)

// Call is one call the fake model received, as the script sees it.
type Call struct {
	// Pos is the sample's step and index, found from the request seed in
	// the seed table; Known is false for a seed not in it.
	Pos
	Known bool
	// Seq counts earlier calls for the same place (re-samples, redeliveries).
	Seq int
	// Temperature, MaxTokens, Seed and Model ("" for the voter's own) as
	// requested.
	Temperature float64
	MaxTokens   int
	Seed        int64
	Model       string
	// State is read back from the prompt; Truth is the strategy's answer
	// from it (TruthErr if there is none, e.g. after a wrong decision).
	State    hanoi.State
	Truth    hanoi.Answer
	TruthErr error
}

// Script answers one call. It should honour ctx like a real client does.
type Script func(ctx context.Context, c Call) (llm.Response, error)

// Record is a finished call.
type Record struct {
	Call
	// Err is what the script returned; CtxErr the call ctx's error when
	// the script returned (set when the voter cancelled the call).
	Err    error
	CtxErr error
	Start  time.Time
	End    time.Time
}

// FakeModel is a voter.Model driven by a script: it reads the Hanoi prompt
// back, works out the sample's place from its seed and the right answer,
// and lets the script decide the reply.
type FakeModel struct {
	script Script
	seeds  map[int64]Pos

	inflight atomic.Int64
	mu       sync.Mutex
	seq      map[Pos]int
	records  []Record
	started  chan Call // if set, gets every call as it starts (non-blocking)
}

var _ voter.Model = (*FakeModel)(nil)

// NewFakeModel returns a fake model that places calls by seeds (from
// SeedTable; nil knows no places). A nil script answers right.
func NewFakeModel(seeds map[int64]Pos, script Script) *FakeModel {
	if script == nil {
		script = func(_ context.Context, c Call) (llm.Response, error) { return Right(c), nil }
	}
	return &FakeModel{script: script, seeds: seeds, seq: map[Pos]int{}}
}

// Notify makes the model send every call, as it starts, to ch (dropping
// it when ch is full). Call before use.
func (f *FakeModel) Notify(ch chan Call) { f.started = ch }

// Complete implements voter.Model.
func (f *FakeModel) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	f.inflight.Add(1)
	defer f.inflight.Add(-1)
	c := Call{Temperature: req.Temperature, MaxTokens: req.MaxTokens, Model: req.Model, Pos: Pos{Step: -1, Index: -1}}
	if req.Seed != nil {
		c.Seed = *req.Seed
		if p, ok := f.seeds[c.Seed]; ok {
			c.Pos, c.Known = p, true
		}
	}
	var err error
	c.State, err = promptState(req.Messages)
	if err != nil {
		return llm.Response{}, fmt.Errorf("%w: %v", llm.ErrPermanent, err)
	}
	c.Truth, c.TruthErr = TrueAnswer(c.State)
	f.mu.Lock()
	c.Seq = f.seq[c.Pos]
	f.seq[c.Pos]++
	f.mu.Unlock()
	if f.started != nil {
		select {
		case f.started <- c:
		default:
		}
	}
	rec := Record{Call: c, Start: time.Now()}
	resp, err := f.script(ctx, c)
	rec.Err, rec.CtxErr, rec.End = err, ctx.Err(), time.Now()
	f.mu.Lock()
	f.records = append(f.records, rec)
	f.mu.Unlock()
	if err == nil {
		resp.Latency = rec.End.Sub(rec.Start)
		resp.Attempts = 1
	}
	return resp, err
}

// Records returns the finished calls so far.
func (f *FakeModel) Records() []Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Record(nil), f.records...)
}

// Calls counts finished calls.
func (f *FakeModel) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.records)
}

// InFlight counts calls in progress.
func (f *FakeModel) InFlight() int64 { return f.inflight.Load() }

// Say is a well-formed reply giving answer a.
func Say(a hanoi.Answer) llm.Response {
	text := "Disk 1 moved last, so by the strategy:\nmove = " + hanoi.FormatMove(a.Move) +
		"\nnext_state = " + hanoi.FormatPegs(a.NextState)
	return llm.Response{
		Choices:      []llm.Choice{{Content: text, FinishReason: "stop"}},
		PromptTokens: 120, CompletionTokens: len(text) / 4, Model: "fake",
	}
}

// Right is the right answer to c, or a reply the parser rejects when the
// state has no strategy move.
func Right(c Call) llm.Response {
	if c.TruthErr != nil {
		return Garbage()
	}
	return Say(c.Truth)
}

// Garbage is a reply the strict parser rejects (red flag "parse").
func Garbage() llm.Response {
	return llm.Response{
		Choices:      []llm.Choice{{Content: "I would move the smallest disk.", FinishReason: "stop"}},
		PromptTokens: 120, CompletionTokens: 8, Model: "fake",
	}
}

// SameMoveWrongState is the right move with the state left unchanged: a
// valid answer (each disk once) that is another candidate than the right
// one.
func SameMoveWrongState(c Call) hanoi.Answer {
	return hanoi.Answer{Move: c.Truth.Move, NextState: c.State.Pegs}
}

// ReversedMove is the reversed move with the right next state: wrong, yet
// the run goes on from the right pegs.
func ReversedMove(c Call) hanoi.Answer {
	m := c.Truth.Move
	return hanoi.Answer{Move: hanoi.Move{m[0], m[2], m[1]}, NextState: c.Truth.NextState}
}

// Wait blocks for d or until ctx ends (then it returns ctx's error), like
// a model's latency.
func Wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// promptState reads "Previous move:" and "Current state:" back from the
// user message of a hanoi step prompt.
func promptState(msgs []llm.Message) (hanoi.State, error) {
	var st hanoi.State
	var sawState bool
	for _, m := range msgs {
		if m.Role != "user" {
			continue
		}
		for _, line := range strings.Split(m.Content, "\n") {
			if rest, ok := strings.CutPrefix(line, "Previous move: "); ok {
				if rest == "none" {
					continue
				}
				var mv hanoi.Move
				if err := json.Unmarshal([]byte(strings.TrimPrefix(rest, "move = ")), &mv); err != nil {
					return st, fmt.Errorf("fake model: previous move %q: %v", rest, err)
				}
				st.Prev = &mv
			}
			if rest, ok := strings.CutPrefix(line, "Current state: "); ok {
				if err := json.Unmarshal([]byte(rest), &st.Pegs); err != nil {
					return st, fmt.Errorf("fake model: state %q: %v", rest, err)
				}
				sawState = true
			}
		}
	}
	if !sawState {
		return st, fmt.Errorf("fake model: no hanoi prompt")
	}
	return st, nil
}
