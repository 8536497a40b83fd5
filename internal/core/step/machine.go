package step

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
	"log/slog"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/vote"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Machine is one job's step machine. It decides what the job does next
// from what happened and does no I/O: each event is a method call (results
// arrived, Redis recorded them, a timer ticked, a tally was closed, the
// judge or a person decided, control changed) that returns the actions
// the shell (the coordinator's jobRun) carries out, in order. An action
// whose outcome the machine needs (record, close the step, arbitrate) is
// the last of its list; the shell feeds its outcome back as the next
// event. A Machine is not safe for concurrent use: one goroutine, the
// job's loop, owns it.
//
// The machine owns the open step's bookkeeping (waves, pending samples,
// the rung of the escalation ladder), the decided chain (state, trace) and
// the job's figures. Its exported fields are the shell's to read; the
// shell writes only Control (what the registry asks, at step boundaries),
// ArbCap (what it reserved for an arbitration), End (a job that ended
// before a restart), Paused (a cancel overriding a pause) and SinceCkpt
// (after it stored a checkpoint).
type Machine struct {
	spec   schemas.JobSpec
	Params json.RawMessage // the task's canonical params, when they travel inline
	// ParamsRef names the params in the inputs store when they travel by
	// reference (schemas.JobSpec.ParamsRef); Params is then nil.
	ParamsRef string
	Inst      task.Instance
	verifier  task.Verifier
	log       *slog.Logger
	token     int64  // the lease token the job runs under
	owner     string // this coordinator's id
	every     int    // decided steps between checkpoints
	crashAt   CrashPoint

	// Control is what the registry last asked of the job (run, pause,
	// cancel); the shell keeps it current, the machine obeys it at step
	// boundaries.
	Control string

	// the decided chain
	Step  int64
	Epoch int64
	State task.State
	Trace hash.Hash

	// escalation of the open step: the rung sampling now ("" for the
	// job's own model), the rungs below it, and this rung's sample cap
	Rung  string
	prior []schemas.RungTally
	capN  int
	// closing is the rung a CloseStep was asked for (rungNone: the job
	// ends)
	closing string
	// (step, epoch) pairs sampled by the stronger model, so its answers'
	// tokens, late ones included, are priced as its own
	strongerAt map[[2]int64]bool
	// price prices an answer's tokens (pricing.go; nil: nothing is
	// priced); asked is the decorrelation model each such request named;
	// unpricedSeen the models said to be unpriced already
	price        priceFunc
	asked        map[sampleAt]string
	unpricedSeen map[string]bool
	// ArbCap is what the open step's arbitration may be billed (what the
	// shell reserved for it; 0: no cap); panelBilled the arbitration
	// request whose cost the figures hold already though it decided
	// nothing (ladder.go)
	ArbCap      float64
	panelBilled string

	// the open step
	dispatched int              // indices published (0 … dispatched-1)
	Pending    map[int]*pending // published, unanswered, by index
	counters   vote.Counters    // as Redis last said
	seen       map[int]string   // indices the tally holds → red-flag reason ("" for a vote)
	seenID     map[int]string   // indices the tally holds → the sample id it counted
	// lastFlag is the open step's last red flag's reason and detail, for
	// the reason a job that ends there gives.
	lastFlag  [2]string
	published int // requests published for this step, re-publishes included
	answered  int // results settled for this step, any outcome
	SinceCkpt int // journal entries since the last checkpoint

	// the steps decided lately, to recognise their answers delivered
	// again (recall.go)
	decided recall

	// Ahead: the steps sampled ahead of the open one (speculate.go)
	Ahead speculation

	// rel: each step's margin k, the correlation test and the
	// reliability receipt (reliability.go)
	rel reliability

	// Tokens tallies the answers' tokens by model for the metrics (off
	// without them; metrics.go).
	Tokens tokenTally

	// caps makes and checks the samples' tokens (capability.go); claims
	// bounds the answers' token counts (claims.go).
	caps   *capabilities
	Claims claims
	// Verified holds, by position in the batch of result messages being
	// handled, the sample ids of the answers in each whose token is their
	// sample's (none for the others): the budget releases only their
	// reservations.
	Verified [][]string
	// parts and left hold, by position in the batch, how many answers
	// each message carries (SampleResult.Also) and how many are not
	// settled yet; fates the settling of each so far (collapse).
	parts, left []int
	fates       []Action
	// split is OnResults' buffer of one message's answers.
	split []schemas.SampleResult

	// Batch holds the results of the batch being recorded, in the order
	// of the samples sent to Redis.
	Batch []Received

	Acct accounts
	// Stalled is when the open step's samples first went unanswered past
	// the sample timeout (zero: they are answered): no voter serves them,
	// or the provider refuses the voters (the shell says so in the
	// status).
	Stalled time.Time
	// Unserved is the last notice that a voter could not have one of the
	// open step's samples served (schemas.OutcomeUnserved), since an
	// answer was last counted: why the job waits (nil: no such notice).
	Unserved *Unserved
	End      *Ending // set once the job has ended
	Paused   bool    // stopped at this boundary: paused, or waiting for a person
}

// Unserved is why a voter handed a sample back unanswered.
type Unserved struct {
	Model string    // the model it could not have served ("" the voters' own)
	Error string    // the provider's answer, as the voter saw it (at most schemas.MaxUnservedDetail bytes)
	At    time.Time // when the notice came
	Voter string
	Step  int64 // the step it was for
	Task  bool  // the voter cannot run the request itself (schemas.UnservedTask)
}

// pending is a published sample with no answer yet.
type pending struct {
	Attempt int
	SentAt  time.Time
	skips   int // answers "skipped" or "cancelled" for this index
}

// maxSkips bounds immediate re-publishes of an index voters keep skipping;
// past it the index waits for the sample timeout, so a confused voter
// cannot make the coordinator spin.
const maxSkips = 3

// maxErrorSteps bounds the wrong steps a report lists.
const maxErrorSteps = schemas.MaxListedSteps

// Ending is how a job ended.
type Ending struct {
	State, Reason string
	NoConsensus   *schemas.NoConsensus
}

// rungNone is the ladder's end: nothing is left to try, the job ends
// no_consensus.
const rungNone = "no_consensus"

// Config is what a machine needs besides the job.
type Config struct {
	// Token is the lease token the job runs under; its epochs are
	// Token × schemas.EpochsPerLease onwards.
	Token int64
	// Owner is this coordinator's id, written into journal entries.
	Owner string
	// CheckpointEvery is the decided steps between checkpoints.
	CheckpointEvery int
	// CrashAt is where the fault suite stops the job (zero: nowhere).
	CrashAt CrashPoint
	// Log receives the machine's warnings (nil: discarded).
	Log *slog.Logger
	// SampleKey is the fleet's key of sample capabilities (the shell's
	// shared secret); nil makes one of the machine's own at random.
	SampleKey []byte
	// Price prices an answer's tokens by the model its request named
	// (nil: nothing is priced).
	Price priceFunc
	// TokensByModel keeps the answers' tokens by model for the metrics
	// (Machine.Tokens).
	TokensByModel bool
	// RecallWindow is how long the answers a decided step counted are
	// recognised when delivered again, and not billed twice (recall.go).
	// Default DefaultRecallWindow (30s): the results stream's duplicate
	// window.
	RecallWindow time.Duration
}

// New returns the machine of spec, bound to inst, at the task's
// initial state (resume moves it on).
func New(spec schemas.JobSpec, inst task.Instance, cfg Config) *Machine {
	m := &Machine{
		spec: spec, Params: inst.Params(), ParamsRef: spec.ParamsRef, Inst: inst, log: cfg.Log,
		token: cfg.Token, owner: cfg.Owner, every: cfg.CheckpointEvery, crashAt: cfg.CrashAt,
		Control:    schemas.ControlRun,
		State:      inst.Initial(),
		Trace:      sha256.New(),
		capN:       spec.MaxSamplesPerStep,
		strongerAt: map[[2]int64]bool{},
		Pending:    map[int]*pending{},
		seen:       map[int]string{},
		seenID:     map[int]string{},
		caps:       newCapabilities(cfg.SampleKey),
		price:      cfg.Price,
	}
	if m.ParamsRef != "" {
		m.Params = nil
	}
	m.verifier, _ = inst.(task.Verifier)
	m.Tokens.On = cfg.TokensByModel
	m.initReliability()
	m.decided = newRecall(cfg.RecallWindow)
	m.Ahead.adopted = [2]int64{-1, -1}
	m.Ahead.refAt = [2]int64{-1, -1}
	m.Epoch = m.token * schemas.EpochsPerLease
	m.counters = vote.Counters{Step: m.Step, Epoch: m.Epoch}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m
}

// over reports whether the chain is over at the current state: the goal
// is reached, the task has no step left, or the job's step limit is
// reached. A task that cannot judge the state (a spec's done expression
// failing) is an error.
func (m *Machine) over() (bool, error) {
	if d, ok := m.Inst.(task.DoneChecker); ok {
		done, err := d.DoneErr(m.State)
		if err != nil {
			return false, err
		}
		if done {
			return true, nil
		}
	} else if m.Inst.Done(m.State) {
		return true, nil
	}
	return m.Step >= m.Inst.TotalSteps() || m.spec.StepLimit > 0 && m.Step >= m.spec.StepLimit, nil
}

// resetStep forgets the open step's samples (a new step, or the same one
// under a new epoch).
func (m *Machine) resetStep() {
	m.dispatched, m.published, m.answered = 0, 0, 0
	m.counters = vote.Counters{Step: m.Step, Epoch: m.Epoch}
	clear(m.Pending)
	clear(m.seen)
	clear(m.seenID)
	m.lastFlag = [2]string{}
	clear(m.Ahead.votes)
	m.Ahead.open = 0
	m.forgetPrompts()
}

// Entry returns a journal entry of type typ for the open step at now, with
// the writer's token and owner filled in.
func (m *Machine) Entry(now time.Time, typ string) schemas.JournalEntry {
	return schemas.JournalEntry{
		Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: m.spec.Tenant, JobID: m.spec.JobID,
		Type: typ, Token: m.token, Owner: m.owner, Step: m.Step, Epoch: m.Epoch, At: now.UTC(),
	}
}

// Actions the shell carries out.
type actKind int

const (
	// ActPublish: publish req (a sample request).
	ActPublish actKind = iota + 1
	// ActAnnounce: publish the step-decided event decided (voters skip
	// and cancel the step's samples).
	ActAnnounce
	// ActRecord: record samples in Redis, then call Recorded (or
	// RecordFailed).
	ActRecord
	// ActSettle: settle the batch's message msg: fate ack, term (reason)
	// or nak (after delay).
	ActSettle
	// ActJournal: append entry to the journal; with wait, until it is
	// stored, else while work goes on (the next append waits for it).
	ActJournal
	// ActOpenStep: open the machine's step under its epoch in Redis.
	ActOpenStep
	// ActCloseStep: close the open step in Redis without a decision, then
	// call Closed with its tally (or Reopen if it is gone).
	ActCloseStep
	// ActArbitrate: ask the judge to settle the step (arb), then call
	// Arbitrated, or NeedsHuman.
	ActArbitrate
	// ActCheckpoint: store a checkpoint of the machine.
	ActCheckpoint
	// ActPause: the job stops at this step boundary, paused (a checkpoint
	// precedes it).
	ActPause
	// ActNeedsHuman: pause the job for a person (reason): checkpoint, ask
	// the registry for a pause, stop.
	ActNeedsHuman
	// ActStatus: publish the job's status now (its rung changed).
	ActStatus
	// ActEnd: the job has ended (machine.end says how); the loop stops.
	ActEnd
	// ActCrash: the fault suite's crash point is reached: exit at once.
	ActCrash
)

// Fates of a result message.
const (
	FateAck = iota + 1
	FateTerm
	fateNak
)

// Action is one thing for the shell to do; kind says which fields are set.
type Action struct {
	Kind    actKind
	Req     *schemas.SampleRequest
	Decided *schemas.StepDecided
	Samples []vote.Sample
	Msg     int // position in the batch (actSettle)
	Fate    int
	Delay   time.Duration
	Reason  string
	Entry   *schemas.JournalEntry
	Wait    bool
	Arb     *schemas.ArbitrationRequest
	Point   string
}

// String is a short description, for logs and test failures.
func (a Action) String() string {
	switch a.Kind {
	case ActPublish:
		return fmt.Sprintf("publish %d/%d", a.Req.Index, a.Req.Attempt)
	case ActAnnounce:
		return fmt.Sprintf("announce %d", a.Decided.Step)
	case ActRecord:
		return fmt.Sprintf("record %d", len(a.Samples))
	case ActSettle:
		return fmt.Sprintf("%s #%d", [...]string{"?", "ack", "term", "nak"}[a.Fate], a.Msg)
	case ActJournal:
		s := "journal " + a.Entry.Type
		if a.Entry.Rung != "" {
			s += "/" + a.Entry.Rung
		}
		return s
	case ActOpenStep:
		return "open"
	case ActCloseStep:
		return "close"
	case ActArbitrate:
		return "arbitrate"
	case ActCheckpoint:
		return "checkpoint"
	case ActPause:
		return "pause"
	case ActNeedsHuman:
		return "needs-human"
	case ActStatus:
		return "status"
	case ActEnd:
		return "end"
	case ActCrash:
		return "crash " + a.Point
	}
	return "?"
}

// describe lists actions as their short descriptions.
func describe(acts []Action) string {
	parts := make([]string, len(acts))
	for i, a := range acts {
		parts[i] = a.String()
	}
	return strings.Join(parts, ", ")
}
