package judge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/judge/judgeclient"
	"github.com/makerfleet/makerfleet/schemas"
)

// The coordinator's side of break glass: a voting step that exhausted its
// samples climbs a ladder (NextRung): one stronger model votes, then, only
// when the job's policy opts in, the judge's panel arbitrates among the
// step's candidates (Arbitrate). The panel's choice is recorded as a
// schemas.ArbiterDecision, its own kind, never counted as votes; when the
// judge is not confident enough, or refuses, the decision is needs_human
// and the job pauses for a person.

// Rungs of the escalation ladder.
const (
	// RungStrongerModel: let Policy.StrongerModel vote on the step.
	RungStrongerModel = schemas.RungStrongerModel
	// RungPanel: ask the judge to arbitrate (Arbitrate).
	RungPanel = schemas.RungPanel
	// RungNoConsensus: nothing left; the job ends no_consensus as before.
	RungNoConsensus = "no_consensus"
)

// NextRung returns what a step that exhausted its samples does next, given
// the job's policy and whether the stronger model already voted (and also
// reached no consensus).
func NextRung(p schemas.EscalationPolicy, strongerDone bool) string {
	switch {
	case !strongerDone && p.StrongerModel != "":
		return RungStrongerModel
	case p.Panel:
		return RungPanel
	default:
		return RungNoConsensus
	}
}

// ArbitrationNotes say what already failed on the step, for the trigger
// protocol's prior attempts.
type ArbitrationNotes struct {
	// LocalModel: the job's own model, e.g. "gpt-4.1-mini: 100 samples, no
	// lead of 3".
	LocalModel string
	// StrongerModel: the stronger model's vote, e.g. "gpt-5.5: 10
	// samples, tally 4/4/2".
	StrongerModel string
	// Tools: the voting machinery, e.g. "first-to-ahead-by-k voting with
	// red-flagging". Default that text.
	Tools string
}

// ArbitrationRequest builds the break-glass request for a voting step of
// a tenant's job. Its id is a function of tenant, job and step, so asking
// again returns the stored answer instead of calling the panel twice; the
// session is the job (so one job gets at most the session limit of
// arbitrations, 3 by default).
func ArbitrationRequest(tenant string, step schemas.ArbitrationStep, notes ArbitrationNotes) *schemas.BreakGlassRequest {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%d", tenant, step.JobID, step.Step)))
	if notes.Tools == "" {
		notes.Tools = "first-to-ahead-by-k voting with red-flagging"
	}
	return &schemas.BreakGlassRequest{
		Header:    schemas.NewHeader(schemas.KindBreakGlassRequest),
		RequestID: "arb-" + hex.EncodeToString(sum[:16]),
		Tenant:    tenant,
		Session:   step.JobID,
		Requester: "coordinator",
		Problem: fmt.Sprintf("break glass: voting step %d of job %s (task %s) reached no consensus after %d samples at margin k=%d; choose the correct candidate",
			step.Step, step.JobID, step.Task, step.Samples, step.K),
		PriorAttempts: []schemas.PriorAttempt{
			{Kind: schemas.AttemptLocalModel, Note: notes.LocalModel},
			{Kind: schemas.AttemptFrontierModel, Note: notes.StrongerModel},
			{Kind: schemas.AttemptTools, Note: notes.Tools},
		},
		Arbitration: &step,
		SubmittedAt: time.Now().UTC(),
	}
}

// ToArbiterDecision turns the judge's response to an arbitration request
// into the step's decision: decided with the chosen vote key when the
// answer is a full answer (not degraded) naming one of the candidates with
// confidence at least threshold; needs_human otherwise, with the reason.
func ToArbiterDecision(req *schemas.BreakGlassRequest, resp *schemas.BreakGlassResponse, threshold float64) *schemas.ArbiterDecision {
	d := &schemas.ArbiterDecision{
		Header:    schemas.NewHeader(schemas.KindArbiterDecision),
		Tenant:    req.Tenant,
		RequestID: req.RequestID,
		Outcome:   schemas.ArbiterNeedsHuman,
		Threshold: threshold,
		DecidedAt: time.Now().UTC(),
	}
	if ar := req.Arbitration; ar != nil {
		d.JobID, d.Step = ar.JobID, ar.Step
	}
	if resp == nil {
		d.Reason = "the judge gave no answer"
		return d
	}
	d.Confidence, d.JudgeModel, d.Panel, d.CostUSD = resp.Solution.Confidence, resp.JudgeModel, resp.Panel, resp.Cost.ActualUSD
	switch {
	case resp.Outcome != schemas.BreakGlassAnswered:
		d.Reason = fmt.Sprintf("the judge's answer is %s: %s", resp.Outcome, resp.Reason)
	case req.Arbitration == nil || !slices.ContainsFunc(req.Arbitration.Candidates, func(e schemas.TallyEntry) bool { return e.VoteKey == resp.Solution.VoteKey }):
		d.Reason = "the judge chose no candidate of the step"
	case resp.Solution.Confidence < threshold:
		d.Reason = fmt.Sprintf("the judge's confidence %.2f is below the threshold %.2f", resp.Solution.Confidence, threshold)
	default:
		d.Outcome, d.VoteKey = schemas.ArbiterDecided, resp.Solution.VoteKey
		d.Reason = fmt.Sprintf("arbiter decision by %s over a panel of %d (confidence %.2f)", resp.JudgeModel, len(resp.Panel), resp.Solution.Confidence)
	}
	if d.Reason == "" {
		d.Reason = "no reason given"
	}
	return d
}

// Arbitrate asks the judges to settle a voting step and returns the
// decision to record (decided, or needs_human). policy.MinConfidence
// (default 0.7) is the threshold. An error means the bus failed or ctx
// ended; a refusal, denial or failure of the judge is a needs_human
// decision, not an error.
func Arbitrate(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, tenant string, step schemas.ArbitrationStep, policy schemas.EscalationPolicy, notes ArbitrationNotes) (*schemas.ArbiterDecision, error) {
	policy = policy.WithDefaults()
	req := ArbitrationRequest(tenant, step, notes)
	resp, err := judgeclient.Ask(ctx, js, ns, req)
	if resp == nil && err != nil {
		return nil, err
	}
	if err != nil && !errors.Is(err, judgeclient.ErrRefused) && !errors.Is(err, judgeclient.ErrDenied) && !errors.Is(err, judgeclient.ErrFailed) {
		return nil, err
	}
	return ToArbiterDecision(req, resp, policy.MinConfidence), nil
}
