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

// The approval flow: a request whose estimate is over ApprovalUSD is held:
// its approval record (state pending, with the whole request) goes to the
// approvals bucket, a held response to the answers bucket (the asker sees
// it and keeps waiting) and a held record to the audit. Approve moves the
// record to approved and publishes the request again; a judge then finds
// it approved and runs it, naming the approver. Deny moves it to denied
// and writes the final denied response. Both are compare-and-set, so two
// people deciding at once cannot both win.

// approved returns the state of the request's approval record ("" when
// there is none) and notes the approver.
func (sv *Service) approved(ctx context.Context, c *call) (string, error) {
	a, err := getApproval(ctx, sv.topo.Approvals, c.req.RequestID)
	if err != nil || a == nil {
		return "", err
	}
	if a.State == schemas.ApprovalApproved {
		c.approver = a.DecidedBy
	}
	return a.State, nil
}

// hold stores the approval record (once) and the held response.
func (sv *Service) hold(ctx context.Context, c *call, reason string) error {
	rec := &schemas.BreakGlassApproval{
		Header:    schemas.NewHeader(schemas.KindBreakGlassApproval),
		RequestID: c.req.RequestID, Tenant: c.req.Tenant, Session: c.req.Session,
		State: schemas.ApprovalPending, EstimateUSD: c.resp.Cost.EstimateUSD, Reason: reason,
		Request: *c.req, RequestedAt: time.Now().UTC(),
	}
	if _, err := approvals(sv.topo.Approvals).Create(ctx, c.req.RequestID, rec); err != nil && !errors.Is(err, bus.ErrConflict) {
		return fmt.Errorf("judge: store approval: %w", err)
	}
	sv.log.Info("judge: request held for approval", "request", c.req.RequestID, "estimate_usd", c.resp.Cost.EstimateUSD)
	return sv.finish(ctx, c, schemas.BreakGlassHeld, reason)
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
	if err := appendAudit(ctx, js, ns, &schemas.BreakGlassAudit{
		RequestID: id, Tenant: a.Tenant, Session: a.Session, Requester: a.Request.Requester,
		Outcome: schemas.BreakGlassApproved, Reason: "approved by " + by, Problem: a.Request.Problem,
		EstimateUSD: a.EstimateUSD, Approver: by,
	}); err != nil {
		return err
	}
	data, err := schemas.Encode(&a.Request)
	if err != nil {
		return err
	}
	if _, err := js.Publish(ctx, ns.JudgeSubject(a.Tenant), data, jetstream.WithMsgID(id+".approved")); err != nil {
		return fmt.Errorf("judge: publish approved request: %w", err)
	}
	return nil
}

// Deny denies the held request id in person by, with a reason, and stores
// the final denied response.
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
	resp := &schemas.BreakGlassResponse{
		Header:    schemas.NewHeader(schemas.KindBreakGlassResponse),
		RequestID: id, Tenant: a.Tenant, Session: a.Session,
		Outcome: schemas.BreakGlassDenied, Reason: why, Approver: by,
		Alternatives: []string{}, Risks: []string{},
		Solution:      schemas.Solution{FilesToChange: []string{}, CodeSnippets: map[string]string{}},
		PanelAnalysis: emptyAnalysis(),
		Cost:          schemas.BreakGlassCost{EstimateUSD: a.EstimateUSD, BudgetUSD: a.Request.BudgetUSD},
		AnsweredAt:    time.Now().UTC(),
	}
	if prev, err := getAnswer(ctx, topo.Answers, id); err == nil && prev != nil {
		resp.ProblemType, resp.TypeSource, resp.Panel, resp.JudgeModel, resp.Mode = prev.ProblemType, prev.TypeSource, prev.Panel, prev.JudgeModel, prev.Mode
		resp.Cost.BudgetUSD = prev.Cost.BudgetUSD
	}
	data, err := schemas.Encode(resp)
	if err != nil {
		return err
	}
	if err := appendAudit(ctx, js, ns, &schemas.BreakGlassAudit{
		RequestID: id, Tenant: a.Tenant, Session: a.Session, Requester: a.Request.Requester,
		Outcome: schemas.BreakGlassDenied, Reason: why, Problem: a.Request.Problem,
		ProblemType: resp.ProblemType, EstimateUSD: a.EstimateUSD, Approver: by,
	}); err != nil {
		return err
	}
	if _, err := topo.Answers.Put(ctx, id, data); err != nil {
		return fmt.Errorf("judge: store denial: %w", err)
	}
	return nil
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
