package coordinator

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

// machine is one job's step machine. It decides what the job does next
// from what happened and does no I/O: each event is a method call (results
// arrived, Redis recorded them, a timer ticked, a tally was closed, the
// judge or a person decided, control changed) that returns the actions
// the shell (jobRun) carries out, in order. An action whose outcome the
// machine needs (record, close the step, arbitrate) is the last of its
// list; the shell feeds its outcome back as the next event.
//
// The machine owns the open step's bookkeeping (waves, pending samples,
// the rung of the escalation ladder), the decided chain (state, trace) and
// the job's figures.
type machine struct {
	spec     schemas.JobSpec
	params   json.RawMessage // the task's canonical params
	inst     task.Instance
	verifier task.Verifier
	log      *slog.Logger
	token    int64  // the lease token the job runs under
	owner    string // this coordinator's id
	every    int    // decided steps between checkpoints
	crashAt  crashPoint

	// control is what the registry last asked of the job (run, pause,
	// cancel); the shell keeps it current, the machine obeys it at step
	// boundaries.
	control string

	// the decided chain
	step  int64
	epoch int64
	state task.State
	trace hash.Hash

	// escalation of the open step: the rung sampling now ("" for the
	// job's own model), the rungs below it, and this rung's sample cap
	rung  string
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
	// arbCap is what the open step's arbitration may be billed (what the
	// shell reserved for it; 0: no cap); panelBilled the arbitration
	// request whose cost the figures hold already though it decided
	// nothing (ladder.go)
	arbCap      float64
	panelBilled string

	// the open step
	dispatched int              // indices published (0 … dispatched-1)
	pending    map[int]*pending // published, unanswered, by index
	counters   vote.Counters    // as Redis last said
	seen       map[int]string   // indices the tally holds → red-flag reason ("" for a vote)
	published  int              // requests published for this step, re-publishes included
	answered   int              // results settled for this step, any outcome
	sinceCkpt  int              // journal entries since the last checkpoint

	// the last decided step, to recognise its answers delivered again
	prev struct {
		step, epoch int64
		counted     int
		seen        map[int]bool
	}

	// sp: the steps sampled ahead of the open one (speculate.go)
	sp speculation

	// rel: each step's margin k, the correlation test and the
	// reliability receipt (reliability.go)
	rel reliability

	// tok tallies the answers' tokens by model for the metrics (off
	// without them; metrics.go).
	tok tokenTally

	// caps makes and checks the samples' tokens (capability.go); claims
	// bounds the answers' token counts (claims.go).
	caps   *capabilities
	claims claims
	// verified holds, by position in the batch of result messages being
	// handled, the sample id of each whose token is its sample's ("" for
	// the others): the budget releases only their reservations.
	verified []string

	// batch holds the results of the batch being recorded, in the order
	// of the samples sent to Redis.
	batch []received

	acct   accounts
	end    *ending // set once the job has ended
	paused bool    // stopped at this boundary: paused, or waiting for a person
}

// pending is a published sample with no answer yet.
type pending struct {
	attempt int
	sentAt  time.Time
	skips   int // answers "skipped" or "cancelled" for this index
}

// maxSkips bounds immediate re-publishes of an index voters keep skipping;
// past it the index waits for the sample timeout, so a confused voter
// cannot make the coordinator spin.
const maxSkips = 3

// maxErrorSteps bounds the wrong steps a report lists.
const maxErrorSteps = schemas.MaxListedSteps

// ending is how a job ended.
type ending struct {
	state, reason string
	noConsensus   *schemas.NoConsensus
}

// rungNone is the ladder's end: nothing is left to try, the job ends
// no_consensus.
const rungNone = "no_consensus"

// machineConfig is what a machine needs besides the job.
type machineConfig struct {
	token           int64
	owner           string
	checkpointEvery int
	crashAt         crashPoint
	log             *slog.Logger
	// sampleKey is the fleet's key of sample capabilities
	// (store.SampleKey); required.
	sampleKey []byte
}

// newMachine returns the machine of spec, bound to inst, at the task's
// initial state (resume moves it on).
func newMachine(spec schemas.JobSpec, inst task.Instance, cfg machineConfig) *machine {
	m := &machine{
		spec: spec, params: inst.Params(), inst: inst, log: cfg.log,
		token: cfg.token, owner: cfg.owner, every: cfg.checkpointEvery, crashAt: cfg.crashAt,
		control:    schemas.ControlRun,
		state:      inst.Initial(),
		trace:      sha256.New(),
		capN:       spec.MaxSamplesPerStep,
		strongerAt: map[[2]int64]bool{},
		pending:    map[int]*pending{},
		seen:       map[int]string{},
		caps:       newCapabilities(cfg.sampleKey),
	}
	m.verifier, _ = inst.(task.Verifier)
	m.initReliability()
	m.prev.step, m.prev.seen = -1, map[int]bool{}
	m.sp.adopted = [2]int64{-1, -1}
	m.sp.refAt = [2]int64{-1, -1}
	m.epoch = m.token * schemas.EpochsPerLease
	m.counters = vote.Counters{Step: m.step, Epoch: m.epoch}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m
}

// over reports whether the chain is over at the current state: the goal
// is reached, the task has no step left, or the job's step limit is
// reached. A task that cannot judge the state (a spec's done expression
// failing) is an error.
func (m *machine) over() (bool, error) {
	if d, ok := m.inst.(task.DoneChecker); ok {
		done, err := d.DoneErr(m.state)
		if err != nil {
			return false, err
		}
		if done {
			return true, nil
		}
	} else if m.inst.Done(m.state) {
		return true, nil
	}
	return m.step >= m.inst.TotalSteps() || m.spec.StepLimit > 0 && m.step >= m.spec.StepLimit, nil
}

// resetStep forgets the open step's samples (a new step, or the same one
// under a new epoch).
func (m *machine) resetStep() {
	m.dispatched, m.published, m.answered = 0, 0, 0
	m.counters = vote.Counters{Step: m.step, Epoch: m.epoch}
	clear(m.pending)
	clear(m.seen)
	clear(m.sp.votes)
	m.sp.open = 0
	m.forgetPrompts()
}

// entry returns a journal entry of type typ for the open step at now, with
// the writer's token and owner filled in.
func (m *machine) entry(now time.Time, typ string) schemas.JournalEntry {
	return schemas.JournalEntry{
		Header: schemas.NewHeader(schemas.KindJournalEntry), Tenant: m.spec.Tenant, JobID: m.spec.JobID,
		Type: typ, Token: m.token, Owner: m.owner, Step: m.step, Epoch: m.epoch, At: now.UTC(),
	}
}

// Actions the shell carries out.
type actKind int

const (
	// actPublish: publish req (a sample request).
	actPublish actKind = iota + 1
	// actAnnounce: publish the step-decided event decided (voters skip
	// and cancel the step's samples).
	actAnnounce
	// actRecord: record samples in Redis, then call recorded (or
	// recordFailed).
	actRecord
	// actSettle: settle the batch's message msg: fate ack, term (reason)
	// or nak (after delay).
	actSettle
	// actJournal: append entry to the journal; with wait, until it is
	// stored, else while work goes on (the next append waits for it).
	actJournal
	// actOpenStep: open the machine's step under its epoch in Redis.
	actOpenStep
	// actCloseStep: close the open step in Redis without a decision, then
	// call closed with its tally (or reopen if it is gone).
	actCloseStep
	// actArbitrate: ask the judge to settle the step (arb), then call
	// arbitrated, or needsHuman.
	actArbitrate
	// actCheckpoint: store a checkpoint of the machine.
	actCheckpoint
	// actPause: the job stops at this step boundary, paused (a checkpoint
	// precedes it).
	actPause
	// actNeedsHuman: pause the job for a person (reason): checkpoint, ask
	// the registry for a pause, stop.
	actNeedsHuman
	// actStatus: publish the job's status now (its rung changed).
	actStatus
	// actEnd: the job has ended (machine.end says how); the loop stops.
	actEnd
	// actCrash: the fault suite's crash point is reached: exit at once.
	actCrash
)

// Fates of a result message.
const (
	fateAck = iota + 1
	fateTerm
	fateNak
)

// action is one thing for the shell to do; kind says which fields are set.
type action struct {
	kind    actKind
	req     *schemas.SampleRequest
	decided *schemas.StepDecided
	samples []vote.Sample
	msg     int // position in the batch (actSettle)
	fate    int
	delay   time.Duration
	reason  string
	entry   *schemas.JournalEntry
	wait    bool
	arb     *schemas.ArbitrationRequest
	point   string
}

// String is a short description, for logs and test failures.
func (a action) String() string {
	switch a.kind {
	case actPublish:
		return fmt.Sprintf("publish %d/%d", a.req.Index, a.req.Attempt)
	case actAnnounce:
		return fmt.Sprintf("announce %d", a.decided.Step)
	case actRecord:
		return fmt.Sprintf("record %d", len(a.samples))
	case actSettle:
		return fmt.Sprintf("%s #%d", [...]string{"?", "ack", "term", "nak"}[a.fate], a.msg)
	case actJournal:
		s := "journal " + a.entry.Type
		if a.entry.Rung != "" {
			s += "/" + a.entry.Rung
		}
		return s
	case actOpenStep:
		return "open"
	case actCloseStep:
		return "close"
	case actArbitrate:
		return "arbitrate"
	case actCheckpoint:
		return "checkpoint"
	case actPause:
		return "pause"
	case actNeedsHuman:
		return "needs-human"
	case actStatus:
		return "status"
	case actEnd:
		return "end"
	case actCrash:
		return "crash " + a.point
	}
	return "?"
}

// describe lists actions as their short descriptions.
func describe(acts []action) string {
	parts := make([]string, len(acts))
	for i, a := range acts {
		parts[i] = a.String()
	}
	return strings.Join(parts, ", ")
}
