package step

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// walk is the machine tests' task: the state is a number, a step's answer
// is "<move>@<next state>" (the move a letter, the next state the answer's
// own), the right answer from n is "A@<n+1>", and the goal is the last
// step's state.
type walk struct{ steps int64 }

var _ task.Verifier = walk{}

func (w walk) Params() json.RawMessage {
	return json.RawMessage(`{"steps":` + strconv.FormatInt(w.steps, 10) + `}`)
}
func (walk) Initial() task.State { return task.State("0") }
func (w walk) TotalSteps() int64 { return w.steps }

// walkRules is the system prompt of a walk: about as long as a short
// real one, so the harness's usage figures (100 prompt tokens) are within
// the prompt's bound.
const walkRules = "Walk one step. Answer <move>@<next state>: the move is one letter from A to Z, " +
	"the right one is A, and the next state is one more than the state you are in."

func (walk) Prompt(s task.State) ([]task.Message, error) {
	return []task.Message{{Role: "system", Content: walkRules}, {Role: "user", Content: "from " + string(s)}}, nil
}
func (walk) Parse(s task.State, reply string) (task.Vote, error) { return task.Vote{Key: reply}, nil }

func (walk) Next(s task.State, v task.Vote) (task.State, error) {
	move, next, ok := strings.Cut(v.Key, "@")
	n, err := strconv.Atoi(next)
	if !ok || err != nil || len(move) != 1 || move[0] < 'A' || move[0] > 'Z' || strconv.Itoa(n) != next {
		return nil, fmt.Errorf("%w: %q", task.ErrMalformed, v.Key)
	}
	return task.State(next), nil
}

func (w walk) Done(s task.State) bool { return string(s) == strconv.FormatInt(w.steps, 10) }

func (walk) Verify(s task.State, v task.Vote) error {
	n, _ := strconv.Atoi(string(s))
	if v.Key != right(n) {
		return fmt.Errorf("%w: %s from %s", task.ErrWrongStep, v.Key, s)
	}
	return nil
}

// right is the right answer from state n.
func right(n int) string { return fmt.Sprintf("A@%d", n+1) }

// script answers a sample request: a vote key, or "!reason" for a red flag.
type script func(req *schemas.SampleRequest) string

// harness is the shell of the machine tests: it carries out the machine's
// actions against a vote.Tally, keeps what was published and journaled, and
// delivers answers when told to.
type harness struct {
	t       testing.TB
	m       *Machine
	tally   vote.Tally // the rule Redis runs, in memory
	now     time.Time
	queue   []*schemas.SampleRequest // published, not yet answered
	sent    []*schemas.SampleRequest // every request published
	entries []schemas.JournalEntry
	acts    []string // every action carried out
	answer  script
	// arbiter answers an arbitration; nil: the test feeds it itself
	arbiter func(*schemas.ArbitrationRequest) *schemas.ArbiterDecision
	arbs    []*schemas.ArbitrationRequest
	paused  bool
	human   string
}

func newHarness(t testing.TB, spec schemas.JobSpec, steps int64, answer script) *harness {
	t.Helper()
	return harnessFor(t, spec, walk{steps}, answer)
}

// harnessFor is newHarness for a task instance of the test's own (a
// variant of walk).
func harnessFor(t testing.TB, spec schemas.JobSpec, inst task.Instance, answer script) *harness {
	t.Helper()
	spec.ApplyDefaults()
	if spec.JobID == "" {
		spec.JobID, spec.Task = "j1", "walk"
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	m := New(spec, inst, Config{Token: 1, Owner: "c1", CheckpointEvery: 1000})
	h := &harness{t: t, m: m, now: time.Unix(1_700_000_000, 0), answer: answer}
	h.do(nil, []Action{m.Open()})
	return h
}

// spec is a job spec of the machine tests.
func spec(k, maxSamples int) schemas.JobSpec {
	return schemas.JobSpec{K: k, MaxSamplesPerStep: maxSamples, Params: json.RawMessage(`{}`), Seed: 7, Tenant: "t"}
}

// start runs the first wave.
func (h *harness) start() {
	h.t.Helper()
	acts, err := h.m.TopUp(h.now)
	h.do(err, acts)
}

func (h *harness) do(err error, acts []Action) {
	h.t.Helper()
	if err != nil {
		h.t.Fatalf("machine: %v", err)
	}
	for _, a := range acts {
		h.acts = append(h.acts, a.String())
		switch a.Kind {
		case ActPublish:
			h.queue = append(h.queue, a.Req)
			h.sent = append(h.sent, a.Req)
		case ActRecord:
			outs := make([]vote.RecordResult, len(a.Samples))
			for i, s := range a.Samples {
				res, err := h.tally.Record(s, h.m.K())
				if err != nil {
					h.t.Fatalf("record: %v", err)
				}
				outs[i] = res
			}
			more, err := h.m.Recorded(h.now, outs)
			h.do(err, more)
		case ActJournal:
			if err := a.Entry.Validate(); err != nil {
				h.t.Fatalf("journal entry %s does not validate: %v", a.Entry.Type, err)
			}
			h.entries = append(h.entries, *a.Entry)
		case ActOpenStep:
			// A later epoch already open refuses, as in Redis: the
			// machine then reads its samples as stale.
			if _, _, err := h.tally.Open(h.m.Step, h.m.Epoch); err != nil && !errors.Is(err, vote.ErrStaleOpen) {
				h.t.Fatalf("open: %v", err)
			}
		case ActCloseStep:
			tally, _, err := h.tally.Close(h.m.Step, h.m.Epoch)
			if err != nil {
				h.t.Fatalf("close: %v", err)
			}
			more, err := h.m.Closed(h.now, tally)
			h.do(err, more)
		case ActArbitrate:
			h.arbs = append(h.arbs, a.Arb)
			if h.arbiter != nil {
				more, err := h.m.Arbitrated(h.now, h.arbiter(a.Arb))
				h.do(err, more)
			}
		case ActPause:
			h.paused = true
		case ActNeedsHuman:
			h.human = a.Reason
		}
	}
}

// deliver answers the oldest n queued requests (all with n < 0) as one
// batch.
func (h *harness) deliver(n int) {
	h.t.Helper()
	if n < 0 || n > len(h.queue) {
		n = len(h.queue)
	}
	batch := h.queue[:n]
	h.queue = h.queue[n:]
	in := make([]Incoming, len(batch))
	for i, req := range batch {
		in[i] = Incoming{Data: h.result(req, h.answer(req))}
	}
	h.do(nil, h.m.OnResults(h.now, in))
	// As the shell's loop does: a step adopted from speculation records
	// the answers it held.
	for len(h.m.Ahead.Feed) > 0 && !h.m.Halted() {
		h.do(nil, h.m.OnFeed(h.now))
	}
}

// sign gives req, changed by a test, its sample id and that id's token:
// a request the machine could have published.
func (h *harness) sign(req *schemas.SampleRequest) {
	req.SampleID = schemas.BranchSampleID(req.Tenant, req.JobID, req.Step, req.Epoch, req.Index, req.Attempt, req.Branch)
	req.Token = h.m.caps.token(req.SampleID)
}

// walkPrompt is the prompt of a walk from state n.
func walkPrompt(n int) []task.Message {
	msgs, _ := walk{}.Prompt(task.State(strconv.Itoa(n)))
	return msgs
}

// result encodes the answer a of req as a voter would.
func (h *harness) result(req *schemas.SampleRequest, a string) []byte {
	return h.resultWith(req, a, nil)
}

// resultWith is result, changed by edit (when not nil) before encoding.
func (h *harness) resultWith(req *schemas.SampleRequest, a string, edit func(*schemas.SampleResult)) []byte {
	res := schemas.SampleResult{
		Header: schemas.NewHeader(schemas.KindSampleResult), Tenant: req.Tenant, JobID: req.JobID, SampleID: req.SampleID,
		Step: req.Step, Epoch: req.Epoch, Index: req.Index, Attempt: req.Attempt, Branch: req.Branch, VoterID: "v1", Model: "m",
		PromptTokens: 100, CompletionTokens: 10, Token: req.Token,
	}
	switch {
	case a == "skipped":
		res.Outcome, res.PromptTokens, res.CompletionTokens = schemas.OutcomeSkipped, 0, 0
	case strings.HasPrefix(a, "!"):
		res.Outcome, res.RedFlag = schemas.OutcomeRedFlag, a[1:]
	default:
		res.Outcome, res.VoteKey = schemas.OutcomeVote, a
	}
	if edit != nil {
		edit(&res)
	}
	data, err := schemas.Encode(&res)
	if err != nil {
		h.t.Fatal(err)
	}
	return data
}

// run delivers answers a batch at a time until the job ends, pauses or
// has nothing in flight.
func (h *harness) run() {
	h.t.Helper()
	for i := 0; len(h.queue) > 0 && !h.m.Halted(); i++ {
		if i > 100_000 {
			h.t.Fatal("run does not end")
		}
		h.deliver(-1)
	}
}

// byIndex answers each index of every step from answers (the last one
// for higher indices).
func byIndex(answers ...func(n int) string) script {
	return func(req *schemas.SampleRequest) string {
		n, _ := strconv.Atoi(string(req.State))
		return answers[min(req.Index, len(answers)-1)](n)
	}
}

func rightAns(n int) string              { return right(n) }
func wrongAns(n int) string              { return fmt.Sprintf("B@%d", n+1) }
func otherState(n int) string            { return fmt.Sprintf("A@%d", n+5) }
func redFlag(int) string                 { return "!parse" }
func constAns(s string) func(int) string { return func(int) string { return s } }

// checkWave checks that the published requests from the i-th on are the
// given indices at attempt 0 for step.
func (h *harness) published(from int) []string {
	var out []string
	for _, r := range h.sent[from:] {
		out = append(out, fmt.Sprintf("%d:%d/%d", r.Step, r.Index, r.Attempt))
	}
	return out
}

var errFake = errors.New("fake")
