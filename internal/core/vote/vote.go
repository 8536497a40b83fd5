package vote

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/makerfleet/makerfleet/schemas"
)

// Sentinel errors. internal/store returns the same values, so callers test
// for them once whichever tally they hold.
var (
	// ErrNoStep: no step is open (the hot state is gone, or the step and
	// epoch given are not the open ones).
	ErrNoStep = errors.New("vote: no open step")
	// ErrStaleOpen: a later step or epoch is already open.
	ErrStaleOpen = errors.New("vote: a later step or epoch is open")
)

// Counters describe the open step.
type Counters struct {
	Step, Epoch int64
	// Next is how many samples, by index, are counted (valid or red-flagged).
	Next int
	// Valid and RedFlagged split the counted samples.
	Valid, RedFlagged int
	// Lead is the top candidate's margin over the runner-up.
	Lead int
}

// Sample is one answer to the open step.
type Sample struct {
	Step, Epoch int64
	Index       int
	// VoteKey is the canonical answer of a valid vote; empty for a
	// red-flagged sample, whose reason is RedFlag.
	VoteKey string
	RedFlag string
	// AfterWinner, when set, guards the sample: it is recorded only if
	// the step before (Step-1) was just decided under Epoch with this
	// winner, and Step is the open step; else nothing is recorded and the
	// outcome is NotYet. A step sampled ahead from a guess of the winner
	// before it is recorded so in the same round trip as that step's
	// deciding samples: a guess that lost records nothing.
	AfterWinner string
}

// Outcome is what recording a sample did.
type Outcome int

// Outcomes.
const (
	// Recorded: stored; counted if every lower index is in.
	Recorded Outcome = iota
	// Decided: this sample closed the step.
	Decided
	// Replayed: the step had been decided; the decision is returned again.
	Replayed
	// Duplicate: the index already had an answer; ignored.
	Duplicate
	// Stale: the sample is for a step or epoch that is not open.
	Stale
	// NotYet: a guarded sample (Sample.AfterWinner) whose guard did not
	// hold; nothing was recorded.
	NotYet
)

func (o Outcome) String() string {
	switch o {
	case Recorded:
		return "recorded"
	case Decided:
		return "decided"
	case Replayed:
		return "replayed"
	case Duplicate:
		return "duplicate"
	case Stale:
		return "stale"
	case NotYet:
		return "not yet"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Decision is a decided step.
type Decision struct {
	Step, Epoch int64
	Winner      string
	// Votes is the winner's valid votes, Lead its margin.
	Votes, Lead int
	// Counted, Valid, RedFlagged: the step's samples that were counted.
	Counted, Valid, RedFlagged int
	// Tally lists every candidate, most votes first.
	Tally []schemas.TallyEntry
}

// RecordResult is the reply to recording a sample.
type RecordResult struct {
	Outcome Outcome
	// Counters of the open step (for Decided and Replayed, of the decided
	// step; for Stale, of the step that is open).
	Counters Counters
	// Decision is set for Decided and Replayed.
	Decision *Decision
}

// SortTally orders a tally most votes first, then by key, so reports are
// deterministic whatever order a store kept the candidates in.
func SortTally(t []schemas.TallyEntry) {
	slices.SortFunc(t, func(a, b schemas.TallyEntry) int {
		if a.Votes != b.Votes {
			return b.Votes - a.Votes
		}
		return strings.Compare(a.VoteKey, b.VoteKey)
	})
}

// Standings returns the top candidate's margin over the runner-up, its key
// and its votes. With one candidate the margin is its votes; ties lead by
// 0 (and the key is then the first of the tied, by key).
func Standings(votes map[string]int) (lead int, key string, top int) {
	second := 0
	for k, c := range votes {
		switch {
		case c > top:
			second, top, key = top, c, k
		case c == top:
			second = c
			key = min(key, k)
		case c > second:
			second = c
		}
	}
	return top - second, key, top
}
