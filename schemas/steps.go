package schemas

import "time"

// StepSummary is one entry of a job's decision journal as GET
// /v1/jobs/{id}/steps sends it (event: step), for the dashboard's plots:
// the counts of a decided step without its tally or its answer.
type StepSummary struct {
	// Seq is the entry's sequence in the journal stream (the event's id:
	// a client resumes after it with Last-Event-ID or ?after=).
	Seq uint64 `json:"seq"`
	// Type is the entry's: decision, arbiter, escalation, takeover or end.
	Type string `json:"type" jsonschema:"enum=decision,enum=takeover,enum=arbiter,enum=escalation,enum=end"`
	// Step is the decided step (decision, arbiter), the escalated step
	// (escalation) or the first step of a new owner (takeover).
	Step int64 `json:"step"`
	// Samples counts every sample the step took, on every rung it climbed.
	Samples int `json:"samples"`
	// Counted, Valid, RedFlagged and RedFlags are the deciding rung's
	// samples: counted, valid votes, red-flagged, and red-flagged by reason.
	Counted    int            `json:"counted"`
	Valid      int            `json:"valid"`
	RedFlagged int            `json:"red_flagged"`
	RedFlags   map[string]int `json:"red_flags,omitempty"`
	// Votes are the winner's valid votes and Lead its margin over the
	// runner-up (decision entries; 0 for an arbiter's).
	Votes int `json:"votes"`
	Lead  int `json:"lead"`
	// Rung is who decided: own_model, stronger_model, panel or person; for
	// an escalation, the rung climbed to; empty for takeover and end.
	Rung string `json:"rung,omitempty" jsonschema:"enum=,enum=own_model,enum=stronger_model,enum=panel,enum=person"`
	// K is the margin the step was sampled at (decision and arbiter
	// entries; 0 when the entry does not say, as older releases' do): an
	// adaptive-k job's k schedule, step by step.
	K int `json:"k,omitempty"`
	// USD is what the entry's work cost at the fleet's prices (its
	// answers and arbitration, the report's cost_usd counts), and
	// UnverifiedUSD what answers the fleet did not price cost at the job's
	// own pricing: added up over the journal, the job's cost so far.
	USD           float64 `json:"usd,omitempty"`
	UnverifiedUSD float64 `json:"unverified_usd,omitempty"`
	// State and Reason are the job's end (end entries).
	State  string `json:"state,omitempty"`
	Reason string `json:"reason,omitempty"`
	// At is when the entry was written.
	At time.Time `json:"at"`
}
