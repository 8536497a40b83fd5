package judge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// The approval flow, the same for break-glass and arbitration requests: a
// request whose estimate is over ApprovalUSD is held: its approval record
// (state pending, with the whole request) goes to the approvals bucket, a
// held response to the answers bucket (the asker sees it and keeps
// waiting) and a held record to the audit. Approve moves the record to
// approved and publishes the request again on its kind's subject; a judge
// then finds it approved and runs it, naming the approver. Deny moves it
// to denied and writes the final denied response. Both are
// compare-and-set, so two people deciding at once cannot both win.

// gateDenied is costGate's decision on a request a person denied.
const gateDenied = schemas.ApprovalDenied

// costGate applies the cost gate to request id: gate's decision (Gate or
// ArbitrationGate on the estimate) given whether a person approved the
// request, a hold's reason naming how to approve it, or gateDenied when a
// person denied it (Deny wrote its answer and audit record). It sets
// *approver to who approved.
func (sv *Service) costGate(ctx context.Context, id string, approver *string, gate func(approved bool) (decision, reason string)) (decision, reason string, err error) {
	a, err := getApproval(ctx, sv.topo.Approvals, id)
	if err != nil {
		return "", "", err
	}
	if a != nil && a.State == schemas.ApprovalDenied {
		return gateDenied, "", nil
	}
	approved := a != nil && a.State == schemas.ApprovalApproved
	if approved {
		*approver = a.DecidedBy
	}
	decision, reason = gate(approved)
	if decision == GateHold {
		reason += " (maker judge approve " + id + ")"
	}
	return decision, reason, nil
}

// storeHold stores rec, the approval record of a request the cost gate
// holds, once: a redelivered request finds its record in place.
func (sv *Service) storeHold(ctx context.Context, rec *schemas.BreakGlassApproval) error {
	rec.Header = schemas.NewHeader(schemas.KindBreakGlassApproval)
	rec.State, rec.RequestedAt = schemas.ApprovalPending, time.Now().UTC()
	if _, err := approvals(sv.topo.Approvals).Create(ctx, rec.RequestID, rec); err != nil && !errors.Is(err, bus.ErrConflict) {
		return fmt.Errorf("judge: store approval: %w", err)
	}
	sv.log.Info("judge: request held for approval", "request", rec.RequestID, "estimate_usd", rec.EstimateUSD)
	return nil
}

// approvals is the typed view of the approvals bucket.
func approvals(kv jetstream.KeyValue) *bus.KV[schemas.BreakGlassApproval] {
	return bus.NewKV(kv, bus.MessageCodec[schemas.BreakGlassApproval]())
}

func getApproval(ctx context.Context, kv jetstream.KeyValue, id string) (*schemas.BreakGlassApproval, error) {
	a, _, err := approvals(kv).Get(ctx, id)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("judge: approval %s: %w", id, err)
	}
	return a, nil
}

// decide moves a pending approval to state, by who, atomically, and
// returns the updated record.
func decide(ctx context.Context, kv jetstream.KeyValue, id, state, by, reason string) (*schemas.BreakGlassApproval, error) {
	if strings.TrimSpace(by) == "" {
		return nil, fmt.Errorf("%w: name who decides", ErrConfig)
	}
	return approvals(kv).Update(ctx, id, func(a *schemas.BreakGlassApproval) (*schemas.BreakGlassApproval, error) {
		if a == nil {
			return nil, fmt.Errorf("%w: no held request %q", ErrNotPending, id)
		}
		if a.State != schemas.ApprovalPending {
			return nil, fmt.Errorf("%w: %s is already %s by %s", ErrNotPending, id, a.State, a.DecidedBy)
		}
		a.State, a.DecidedBy, a.DecidedAt = state, by, time.Now().UTC()
		if reason != "" {
			a.Reason = reason
		}
		return a, nil
	})
}

// HeldProblem says what a held request asks, for a person deciding it:
// the break-glass problem (key patterns redacted) or the arbitrated step.
func HeldProblem(a *schemas.BreakGlassApproval) string {
	if a.Arbitration != nil {
		return arbitrationSummary(a.Arbitration)
	}
	return Redact(a.Request.Problem)
}

// decisionAudit is the audit record of a person's decision on the held
// request a.
func decisionAudit(a *schemas.BreakGlassApproval, outcome, reason string) *schemas.BreakGlassAudit {
	rec := &schemas.BreakGlassAudit{
		RequestID: a.RequestID, Tenant: a.Tenant, Session: a.Session, RequestKind: schemas.KindBreakGlassRequest,
		Outcome: outcome, Reason: reason, Problem: HeldProblem(a), EstimateUSD: a.EstimateUSD, Approver: a.DecidedBy,
	}
	if a.Arbitration != nil {
		rec.Requester, rec.RequestKind = arbitrationRequester, schemas.KindArbitrationRequest
	} else {
		rec.Requester = a.Request.Requester
	}
	return rec
}

// Approve approves the held request id in person by and publishes it again
// for a judge to run.
func Approve(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, id, by string) error {
	topo, err := bus.EnsureJudge(ctx, js, bus.JudgeConfig{Namespace: ns})
	if err != nil {
		return err
	}
	a, err := decide(ctx, topo.Approvals, id, schemas.ApprovalApproved, by, "")
	if err != nil {
		return err
	}
	if err := appendAudit(ctx, js, ns, decisionAudit(a, schemas.BreakGlassApproved, "approved by "+by)); err != nil {
		return err
	}
	var req schemas.Message = a.Request
	subject := ns.JudgeSubject(a.Tenant)
	if a.Arbitration != nil {
		req, subject = a.Arbitration, ns.ArbitrateSubject(a.Tenant)
	}
	data, err := schemas.Encode(req)
	if err != nil {
		return err
	}
	if _, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(id+".approved")); err != nil {
		return fmt.Errorf("judge: publish approved request: %w", err)
	}
	return nil
}

// Deny denies the held request id in person by, with a reason, and stores
// the final denied response: a break-glass answer, or an arbitration's
// needs_human decision.
func Deny(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, id, by, reason string) error {
	topo, err := bus.EnsureJudge(ctx, js, bus.JudgeConfig{Namespace: ns})
	if err != nil {
		return err
	}
	why := "denied by " + by
	if strings.TrimSpace(reason) != "" {
		why += ": " + reason
	}
	a, err := decide(ctx, topo.Approvals, id, schemas.ApprovalDenied, by, why)
	if err != nil {
		return err
	}
	rec := decisionAudit(a, schemas.BreakGlassDenied, why)
	var resp schemas.Message
	if a.Arbitration != nil {
		resp, err = deniedArbitration(ctx, topo.Answers, a, why)
	} else {
		var bg *schemas.BreakGlassResponse
		if bg, err = deniedBreakGlass(ctx, topo.Answers, a, why); err == nil {
			rec.ProblemType, resp = bg.ProblemType, bg
		}
	}
	if err != nil {
		return err
	}
	if err := appendAudit(ctx, js, ns, rec); err != nil {
		return err
	}
	return putAnswer(ctx, topo.Answers, id, resp)
}

// deniedBreakGlass is the final answer of the denied break-glass request
// a, keeping what its held answer said of type, panel and budget.
func deniedBreakGlass(ctx context.Context, answers jetstream.KeyValue, a *schemas.BreakGlassApproval, why string) (*schemas.BreakGlassResponse, error) {
	resp := &schemas.BreakGlassResponse{
		Header:    schemas.NewHeader(schemas.KindBreakGlassResponse),
		RequestID: a.RequestID, Tenant: a.Tenant, Session: a.Session,
		Outcome: schemas.BreakGlassDenied, Reason: why, Approver: a.DecidedBy,
		Alternatives: []string{}, Risks: []string{},
		Solution:      schemas.Solution{FilesToChange: []string{}, CodeSnippets: map[string]string{}},
		PanelAnalysis: emptyAnalysis(),
		Cost:          schemas.BreakGlassCost{EstimateUSD: a.EstimateUSD, BudgetUSD: a.Request.BudgetUSD},
		AnsweredAt:    time.Now().UTC(),
	}
	var prev schemas.BreakGlassResponse
	if found, err := getAnswer(ctx, answers, a.RequestID, &prev); err != nil {
		return nil, err
	} else if found {
		resp.ProblemType, resp.TypeSource, resp.Panel, resp.JudgeModel, resp.Mode = prev.ProblemType, prev.TypeSource, prev.Panel, prev.JudgeModel, prev.Mode
		resp.Cost.BudgetUSD = prev.Cost.BudgetUSD
	}
	return resp, nil
}

// deniedArbitration is the final answer of the denied arbitration a: its
// step needs a person.
func deniedArbitration(ctx context.Context, answers jetstream.KeyValue, a *schemas.BreakGlassApproval, why string) (*schemas.ArbitrationResponse, error) {
	c := newArbitration(a.Arbitration, nil)
	c.resp.Cost.EstimateUSD, c.approver = a.EstimateUSD, a.DecidedBy
	var prev schemas.ArbitrationResponse
	if found, err := getAnswer(ctx, answers, a.RequestID, &prev); err != nil {
		return nil, err
	} else if found {
		c.resp.Cost.BudgetUSD = prev.Cost.BudgetUSD
	}
	c.end(schemas.BreakGlassDenied, why, nil)
	return c.resp, nil
}

// Pending lists the requests waiting for approval.
func Pending(ctx context.Context, js jetstream.JetStream, ns bus.Namespace) ([]schemas.BreakGlassApproval, error) {
	topo, err := bus.EnsureJudge(ctx, js, bus.JudgeConfig{Namespace: ns})
	if err != nil {
		return nil, err
	}
	lister, err := topo.Approvals.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("judge: list approvals: %w", err)
	}
	var out []schemas.BreakGlassApproval
	for key := range lister.Keys() {
		a, err := getApproval(ctx, topo.Approvals, key)
		if err == nil && a != nil && a.State == schemas.ApprovalPending {
			out = append(out, *a)
		}
	}
	return out, nil
}
