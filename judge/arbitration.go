package judge

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/judge/guard"
	"github.com/makerfleet/makerfleet/schemas"
)

// Arbitration: the coordinator's side of the judge. A voting step that no
// rung of its job's ladder could decide comes as a
// schemas.ArbitrationRequest on its own subject, passes the arbitration
// gates (doc.go) and ends as a schemas.ArbitrationResponse under its
// request id whose ArbiterDecision the step records: decided with one of
// its candidates, or needs_human.

// arbitrationRequester names the coordinator in the audit trail.
const arbitrationRequester = "coordinator"

// arbitration is one arbitration request in progress.
type arbitration struct {
	req        *schemas.ArbitrationRequest
	resp       *schemas.ArbitrationResponse
	panel      []string
	judgeModel string
	approver   approver
	diagnosis  string // the judge's, for the audit trail
}

// newArbitration starts the response to req with the panel, judge model
// and budget of s (nil: none, for a denial): the arbitration section's
// budget, or what the job holds for the call (req.BudgetUSD) when that is
// less.
func newArbitration(req *schemas.ArbitrationRequest, s *Settings) *arbitration {
	c := &arbitration{req: req, resp: &schemas.ArbitrationResponse{
		Header:    schemas.NewHeader(schemas.KindArbitrationResponse),
		RequestID: req.RequestID, Tenant: req.Tenant, JobID: req.JobID, Step: req.Step,
	}}
	if s != nil {
		c.panel, c.judgeModel = slices.Clone(s.Arbitration.Panel), s.Arbitration.JudgeModel
		c.resp.Cost.BudgetUSD = s.Arbitration.BudgetUSD
		if b := req.BudgetUSD; b > 0 && b < c.resp.Cost.BudgetUSD {
			c.resp.Cost.BudgetUSD = b
		}
	}
	return c
}

// processArbitration handles one arbitration request message. Gate 1,
// shape: a request that fails Decode but names its step consistently
// (tenant, job, step and the request id they hash to) is answered with a
// refusal, so its asker learns why at once; one that does not is
// terminated.
//
// The subject proves the tenant (only the coordinator may publish
// arbitrations, each on its job's tenant's subject): a request whose body
// names another tenant is terminated, as no answer can be stored where
// its asker would look.
func (sv *Service) processArbitration(ctx context.Context, msg jetstream.Msg) error {
	tenant, ok := sv.topo.NS.JudgeRequestTenant(msg.Subject())
	if !ok {
		return sv.unreadable(fmt.Errorf("judge: subject %q names no tenant", msg.Subject()))
	}
	var req schemas.ArbitrationRequest
	shape := schemas.Decode(msg.Data(), &req)
	if shape != nil {
		step, ok := readStep(msg.Data())
		if !ok {
			return sv.unreadable(shape)
		}
		req = *step
	}
	if req.Tenant != tenant {
		return sv.unreadable(fmt.Errorf("judge: arbitration %s names tenant %q but came on tenant %q's subject", req.RequestID, req.Tenant, tenant))
	}
	return sv.retried(req.RequestID, sv.arbitrate(ctx, &req, shape))
}

// readStep reads the step a request that failed Decode names, if it names
// one consistently; only the step's ids are kept.
func readStep(data []byte) (*schemas.ArbitrationRequest, bool) {
	var r schemas.ArbitrationRequest
	if len(data) > schemas.MaxMessageBytes || json.Unmarshal(data, &r) != nil {
		return nil, false
	}
	if schemas.ValidTenant(r.Tenant) != nil || schemas.ValidJobID(r.JobID) != nil || r.Step < 0 ||
		r.RequestID != schemas.ArbitrationRequestID(r.Tenant, r.JobID, r.Step) {
		return nil, false
	}
	return &schemas.ArbitrationRequest{RequestID: r.RequestID, Tenant: r.Tenant, JobID: r.JobID, Step: r.Step}, true
}

// arbitrate runs the arbitration gates (doc.go) for req and stores the
// response; shape is why req failed Decode, if it did. An error means the
// bus failed (retry); every refusal is a stored response.
func (sv *Service) arbitrate(ctx context.Context, req *schemas.ArbitrationRequest, shape error) error {
	// A redelivered request that was already answered is done.
	var prev schemas.ArbitrationResponse
	if found, err := getAnswer(ctx, sv.topo.Answers, req.Tenant, req.RequestID, &prev); err != nil || found && prev.Outcome != schemas.BreakGlassHeld {
		return err
	}
	// The approval record, read once: an approved arbitration runs as the
	// copy stored when it was held.
	held, err := getApproval(ctx, sv.topo.Approvals, bus.JudgeApprovalKey(req.Tenant, req.RequestID))
	if err != nil {
		return err
	}
	if held != nil && held.State == schemas.ApprovalApproved && held.Arbitration != nil {
		req, shape = held.Arbitration, nil
	}
	// 1. Shape: Decode checked sizes, the candidates against the rungs
	// and the id against the step.
	// 2. The arbitration panel and judge model, from the settings.
	c := newArbitration(req, sv.s)
	if shape != nil {
		return sv.finishArbitration(ctx, c, schemas.BreakGlassRefused, "not a valid arbitration request: "+clip(shape.Error(), 300), nil)
	}

	// 3. Context assembly.
	a, refusal := AssembleArbitration(req, sv.s)
	if refusal != "" {
		return sv.finishArbitration(ctx, c, schemas.BreakGlassRefused, refusal, nil)
	}
	estimate := sv.s.Estimate(a, c.panel, c.judgeModel)
	c.resp.Cost.EstimateUSD = estimate

	// 4. The cost gate, with approval.
	decision, reason := costGate(held, req.RequestID, &c.approver, func(approved bool) (string, string) {
		return sv.s.ArbitrationGate(estimate, c.resp.Cost.BudgetUSD, approved)
	})
	switch {
	case decision == gateDenied:
		return nil // a denial: Deny wrote the final response and the audit record
	case decision == GateRefuse:
		return sv.finishArbitration(ctx, c, schemas.BreakGlassRefused, reason, nil)
	case decision == GateHold:
		if err := sv.storeHold(ctx, &schemas.BreakGlassApproval{RequestID: req.RequestID, Tenant: req.Tenant, Session: req.JobID,
			EstimateUSD: estimate, Reason: reason, Arbitration: guardedArbitration(req)}); err != nil {
			return err
		}
		return sv.finishArbitration(ctx, c, schemas.BreakGlassHeld, reason, nil)
	}

	// 5. Per-job limits, then the tenant's over its rolling window (its
	// break-glass calls and its jobs' arbitrations together), atomically
	// across replicas.
	key, jl, seed := bus.JudgeJobKey(req.Tenant, req.JobID), sv.s.jobLimits(), sv.auditSeed(req.Tenant, req.JobID, 0, schemas.KindArbitrationRequest)
	reason, err = reserve(ctx, sv.topo.Sessions, key, req.RequestID, estimate, jl, seed)
	if err == nil && reason == "" {
		if reason, err = sv.reserveTenant(ctx, req.Tenant, req.RequestID, estimate); err == nil && reason != "" {
			err = release(ctx, sv.topo.Sessions, key, req.RequestID)
		}
	}
	if err != nil {
		return err
	}
	if reason != "" {
		return sv.finishArbitration(ctx, c, schemas.BreakGlassRefused, reason, nil)
	}
	sv.log.Info("judge: calling the arbitration panel", "request", req.RequestID, "job", req.JobID, "step", req.Step,
		"panel", c.panel, "estimate_usd", estimate)

	// 6. The panel and the judge's synthesis (a vote key among the
	// candidates).
	con := sv.consult(ctx, a, c.panel, c.judgeModel, req.Candidates, &c.resp.Cost)
	if ctx.Err() != nil {
		return ctx.Err() // stopped mid-call: another judge retries (the reservation is kept)
	}
	if err := settle(ctx, sv.topo.Sessions, key, req.RequestID, c.resp.Cost.ActualUSD, jl, seed); err != nil {
		return err
	}
	if err := sv.settleTenant(ctx, req.Tenant, req.RequestID, c.resp.Cost.ActualUSD); err != nil {
		return err
	}
	c.resp.Members, c.resp.FailedMembers = con.members, con.failed

	// 7. The decision (finishArbitration).
	return sv.finishArbitration(ctx, c, con.outcome, con.reason, con.syn)
}

// AssembleArbitration builds the panel and judge prompts of an
// arbitration: the step's state (key patterns redacted), what each rung
// drew and the candidates, fenced as data. It returns a refusal instead
// when the step cannot go to a model: a candidate holding a key-like
// string (redacted, it could not be chosen verbatim), or a panel prompt
// over MaxContextTokens (nothing of a step can be left out).
func AssembleArbitration(req *schemas.ArbitrationRequest, s *Settings) (a Assembled, refusal string) {
	for i, c := range req.Candidates {
		if guard.ContainsSecret(c.VoteKey) {
			return a, fmt.Sprintf("secret guard: candidate %d holds an API key or private key pattern, and no credential is sent to a model", i+1)
		}
	}
	state := guard.Redact(req.State)
	a = Assembled{Problem: arbitrationSummary(req), Nonce: newNonce()}
	a.System = arbitrationPanelSystemPrompt(a.Nonce)
	a.User = arbitrationPanelUserPrompt(req, state, a.Nonce)
	a.judgeSystem = arbitrationJudgeSystemPrompt(a.Nonce)
	a.judgeUser = func(answers []memberAnswer) string { return arbitrationJudgeUserPrompt(req, state, a.Nonce, answers) }
	if n := EstimateTokens(a.System) + EstimateTokens(a.User); n > s.MaxContextTokens {
		return a, fmt.Sprintf("the step's prompt is about %d tokens, over max_context_tokens %d", n, s.MaxContextTokens)
	}
	return a, ""
}

// arbitrationSummary names an arbitration's step in one line (the audit
// record's problem).
func arbitrationSummary(req *schemas.ArbitrationRequest) string {
	if req.Task == "" { // refused for its shape: only the ids are known
		return fmt.Sprintf("arbitration of step %d of job %s", req.Step, req.JobID)
	}
	return fmt.Sprintf("arbitration of step %d of job %s (task %s): %d candidates after %d samples, min confidence %.2f",
		req.Step, req.JobID, req.Task, len(req.Candidates), req.Samples, req.MinConfidence)
}

// decide is the step's decision on an arbitration that ended with
// outcome for reason (syn: the judge's answer, when answered): decided
// only for an answered outcome naming one of the candidates with at least
// the request's min confidence; needs_human, saying why, otherwise.
func (c *arbitration) decide(outcome, reason string, syn *synthesis) *schemas.ArbiterDecision {
	req := c.req
	d := &schemas.ArbiterDecision{
		Header: schemas.NewHeader(schemas.KindArbiterDecision),
		Tenant: req.Tenant, JobID: req.JobID, Step: req.Step, RequestID: req.RequestID,
		Outcome: schemas.ArbiterNeedsHuman, Threshold: req.MinConfidence,
		JudgeModel: c.judgeModel, Panel: c.panel, CostUSD: c.resp.Cost.ActualUSD, DecidedAt: time.Now().UTC(),
	}
	if syn != nil {
		d.Confidence = syn.Solution.Confidence
	}
	switch {
	case outcome != schemas.BreakGlassAnswered || syn == nil:
		d.Reason = fmt.Sprintf("the judge's answer is %s: %s", outcome, reason)
	case !slices.ContainsFunc(req.Candidates, func(e schemas.TallyEntry) bool { return e.VoteKey == syn.Solution.VoteKey }):
		d.Reason = "the judge chose no candidate of the step"
	case d.Confidence < req.MinConfidence:
		d.Reason = fmt.Sprintf("the judge's confidence %.2f is below the threshold %.2f", d.Confidence, req.MinConfidence)
	default:
		d.Outcome, d.VoteKey = schemas.ArbiterDecided, syn.Solution.VoteKey
		d.Reason = fmt.Sprintf("arbiter decision by %s over a panel of %d (confidence %.2f)", c.judgeModel, len(c.panel), d.Confidence)
		if reason != "" {
			d.Reason += "; " + reason
		}
	}
	return d
}

// end fills c's response: held with reason, or final with the step's
// decision (syn: the judge's answer, when answered).
func (c *arbitration) end(outcome, reason string, syn *synthesis) {
	r := c.resp
	r.Outcome, r.Approver, r.AnsweredAt = outcome, c.approver.by, time.Now().UTC()
	if outcome == schemas.BreakGlassHeld {
		r.Reason = guard.Redact(reason)
		return
	}
	r.Decision = c.decide(outcome, guard.Redact(reason), syn)
	if syn != nil {
		c.diagnosis = syn.Diagnosis
	}
}

// finishArbitration ends c (see end), appends its audit record and
// stores the response.
func (sv *Service) finishArbitration(ctx context.Context, c *arbitration, outcome, reason string, syn *synthesis) error {
	c.end(outcome, reason, syn)
	r := c.resp
	rec := schemas.BreakGlassAudit{
		RequestID: r.RequestID, Tenant: r.Tenant, Session: r.JobID, Requester: arbitrationRequester,
		RequestKind: schemas.KindArbitrationRequest, Outcome: outcome, Reason: r.Reason, Problem: arbitrationSummary(c.req),
		Panel: c.panel, JudgeModel: c.judgeModel, EstimateUSD: r.Cost.EstimateUSD, ActualUSD: r.Cost.ActualUSD,
		Diagnosis: c.diagnosis, Approver: c.approver.by, ApproverIdentity: c.approver.as, FailedMembers: r.FailedMembers,
	}
	if d := r.Decision; d != nil {
		rec.Reason, rec.Confidence = d.Reason, d.Confidence
	}
	// The audit record first: once the answer is visible, so is its
	// record (a redelivery's duplicate record is dropped by its msg id).
	if err := appendAudit(ctx, sv.js, sv.topo.NS, &rec); err != nil {
		return err
	}
	if err := putAnswer(ctx, sv.topo.Answers, r.Tenant, r.RequestID, r); err != nil {
		return err
	}
	sv.cfg.Metrics.Finished(metricKindArbitration, outcome, refusalReason(outcome, reason), r.Tenant, r.Cost.ActualUSD)
	sv.log.Info("judge: arbitration done", "request", r.RequestID, "outcome", outcome, "reason", rec.Reason,
		"estimate_usd", r.Cost.EstimateUSD, "actual_usd", r.Cost.ActualUSD)
	return nil
}
