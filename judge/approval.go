package judge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/judge/guard"
	"github.com/makerfleet/makerfleet/schemas"
)

// The approval flow, the same for break-glass and arbitration requests: a
// request whose estimate is over ApprovalUSD is held: its approval record
// (state pending, with the whole request) goes to the approvals bucket, a
// held response to the answers bucket (the asker sees it and keeps
// waiting) and a held record to the audit.
//
// A person decides with an schemas.ApprovalDecision sent as a request on
// the approval subject of the identity they act as
// (<ns>.v1.judge_approve.<identity>); a judge serves it (queue group
// "judges"). The NATS server lets an identity publish there only under
// its own name, so the subject proves who decides; the judge refuses a
// decision by the requester's own identity (api for a break-glass
// request: tenants ask through maker serve; coordinator for an
// arbitration). Approving moves the record to approved and publishes the
// request again on its kind's subject; a judge then finds it approved and
// runs it, naming the approver. Denying moves it to denied and writes the
// final denied response. Both are compare-and-set, so two people deciding
// at once cannot both win.

// Sentinel errors of a decision (besides ErrNotPending).
var (
	// ErrOwnRequest: the identity deciding is the one that asked.
	ErrOwnRequest = errors.New("judge: a requester cannot decide its own held request")
	// ErrDecision: the decision is malformed or ambiguous.
	ErrDecision = errors.New("judge: invalid decision")
)

// gateDenied is costGate's decision on a request a person denied.
const gateDenied = schemas.ApprovalDenied

// Identities a requester has: maker serve's, which asks for the tenants
// (they have no NATS identity), and the coordinator for its arbitrations
// (see docs/security.md).
const (
	coordinatorIdentity = "coordinator"
	apiIdentity         = "api"
)

// requesterIdentity is the identity that asked for the held request a:
// the one that may not decide it.
func requesterIdentity(a *schemas.BreakGlassApproval) string {
	if a.Arbitration != nil {
		return coordinatorIdentity
	}
	return apiIdentity
}

// approver is who decided a held request: the person's name, and the
// identity the approval's subject proves.
type approver struct {
	by, as string
}

// costGate applies the cost gate to request id, whose approval record
// (nil: none) is a: gate's decision (RequestGate or ArbitrationGate on the
// estimate) given whether a person approved the request, a hold's reason
// naming how to approve it, or gateDenied when a person denied it (Deny
// already wrote its answer). An approval is handed over to who approved.
// The caller runs an approved request as the copy a stores.
func costGate(a *schemas.BreakGlassApproval, id string, who *approver, gate func(approved bool) (decision, reason string)) (decision, reason string) {
	if a != nil && a.State == schemas.ApprovalDenied {
		return gateDenied, ""
	}
	approved := a != nil && a.State == schemas.ApprovalApproved
	if approved {
		*who = approver{by: a.DecidedBy, as: a.DecidedAs}
	}
	decision, reason = gate(approved)
	if decision == GateHold {
		reason += " (maker judge approve " + id + ")"
	}
	return decision, reason
}

// storeHold stores rec, the approval record of a request the cost gate
// holds, once: a redelivered request finds its record in place.
func (sv *Service) storeHold(ctx context.Context, rec *schemas.BreakGlassApproval) error {
	rec.Header = schemas.NewHeader(schemas.KindBreakGlassApproval)
	rec.State, rec.RequestedAt = schemas.ApprovalPending, time.Now().UTC()
	if _, err := approvals(sv.topo.Approvals).Create(ctx, bus.JudgeApprovalKey(rec.Tenant, rec.RequestID), rec); err != nil && !errors.Is(err, bus.ErrConflict) {
		return fmt.Errorf("judge: store approval: %w", err)
	}
	sv.log.Info("judge: request held for approval", "request", rec.RequestID, "tenant", rec.Tenant, "estimate_usd", rec.EstimateUSD)
	return nil
}

// approvals is the typed view of the approvals bucket.
func approvals(kv jetstream.KeyValue) *bus.KV[schemas.BreakGlassApproval] {
	return bus.NewKV(kv, bus.MessageCodec[schemas.BreakGlassApproval]())
}

func getApproval(ctx context.Context, kv jetstream.KeyValue, key string) (*schemas.BreakGlassApproval, error) {
	a, _, err := approvals(kv).Get(ctx, key)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("judge: approval %s: %w", key, err)
	}
	return a, nil
}

// approvalKey finds the key of the held request d names: its tenant's,
// when d names the tenant; else the one key of that id, refusing an id two
// tenants hold (the decider must name the tenant).
func approvalKey(ctx context.Context, kv jetstream.KeyValue, d *schemas.ApprovalDecision) (string, error) {
	if d.Tenant != "" {
		return bus.JudgeApprovalKey(d.Tenant, d.RequestID), nil
	}
	lister, err := kv.ListKeysFiltered(ctx, bus.JudgeApprovalKey("*", d.RequestID))
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return "", fmt.Errorf("%w: no held request %q", ErrNotPending, d.RequestID)
	}
	if err != nil {
		return "", fmt.Errorf("judge: list approvals: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	switch len(keys) {
	case 0:
		return "", fmt.Errorf("%w: no held request %q", ErrNotPending, d.RequestID)
	case 1:
		return keys[0], nil
	}
	return "", fmt.Errorf("%w: %d tenants hold a request %q; name the tenant (--tenant)", ErrDecision, len(keys), d.RequestID)
}

// decide moves the pending approval under key to state, by who,
// atomically, and returns the updated record. The requester's own
// identity may not decide.
func decide(ctx context.Context, kv jetstream.KeyValue, key, id, state string, who approver, reason string) (*schemas.BreakGlassApproval, error) {
	if strings.TrimSpace(who.by) == "" || strings.TrimSpace(who.as) == "" {
		return nil, fmt.Errorf("%w: name who decides, and as which identity", ErrDecision)
	}
	return approvals(kv).Update(ctx, key, func(a *schemas.BreakGlassApproval) (*schemas.BreakGlassApproval, error) {
		if a == nil {
			return nil, fmt.Errorf("%w: no held request %q", ErrNotPending, id)
		}
		if req := requesterIdentity(a); who.as == req {
			return nil, fmt.Errorf("%w: %s asked for %s, and a requester never decides its own call", ErrOwnRequest, req, id)
		}
		if a.State != schemas.ApprovalPending {
			return nil, fmt.Errorf("%w: %s is already %s by %s", ErrNotPending, id, a.State, a.DecidedBy)
		}
		a.State, a.DecidedBy, a.DecidedAs, a.DecidedAt = state, who.by, who.as, time.Now().UTC()
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
	return guard.Redact(a.Request.Problem)
}

// decisionAudit is the audit record of a person's decision on the held
// request a.
func decisionAudit(a *schemas.BreakGlassApproval, outcome, reason string) *schemas.BreakGlassAudit {
	rec := &schemas.BreakGlassAudit{
		RequestID: a.RequestID, Tenant: a.Tenant, Session: a.Session, RequestKind: schemas.KindBreakGlassRequest,
		Outcome: outcome, Reason: reason, Problem: HeldProblem(a), EstimateUSD: a.EstimateUSD,
		Approver: a.DecidedBy, ApproverIdentity: a.DecidedAs,
	}
	if a.Arbitration != nil {
		rec.Requester, rec.RequestKind = arbitrationRequester, schemas.KindArbitrationRequest
	} else {
		rec.Requester = a.Request.Requester
	}
	return rec
}

// decideHeld carries out d, sent by identity as: it approves or denies the
// held request d names and returns its updated record.
func (sv *Service) decideHeld(ctx context.Context, as string, d *schemas.ApprovalDecision) (*schemas.BreakGlassApproval, error) {
	key, err := approvalKey(ctx, sv.topo.Approvals, d)
	if err != nil {
		return nil, err
	}
	who := approver{by: d.By, as: as}
	var a *schemas.BreakGlassApproval
	if d.Decision == schemas.DecisionApprove {
		a, err = sv.approve(ctx, key, d.RequestID, who)
	} else {
		a, err = sv.deny(ctx, key, d.RequestID, who, d.Reason)
	}
	if err != nil {
		return nil, err
	}
	// The reply shows the person only the guarded copy.
	return displayApproval(a, sv.s), nil
}

// approve approves the held request under key and publishes it again for
// a judge to run. The message id is the tenant's, so another tenant's
// request of the same id is not taken for a duplicate.
func (sv *Service) approve(ctx context.Context, key, id string, who approver) (*schemas.BreakGlassApproval, error) {
	ns := sv.topo.NS
	a, err := decide(ctx, sv.topo.Approvals, key, id, schemas.ApprovalApproved, who, "")
	if err != nil {
		return nil, err
	}
	if err := appendAudit(ctx, sv.js, ns, decisionAudit(a, schemas.BreakGlassApproved, "approved by "+who.by+" as "+who.as)); err != nil {
		return nil, err
	}
	var req schemas.Message = a.Request
	subject := ns.JudgeSubject(a.Tenant)
	if a.Arbitration != nil {
		req, subject = a.Arbitration, ns.ArbitrateSubject(a.Tenant)
	}
	data, err := schemas.Encode(req)
	if err != nil {
		return nil, err
	}
	if _, err := sv.js.Publish(ctx, subject, data, jetstream.WithMsgID(judgeclient.MsgID(a.Tenant, id)+".approved")); err != nil {
		return nil, fmt.Errorf("judge: publish approved request: %w", err)
	}
	sv.log.Info("judge: held request approved", "request", id, "tenant", a.Tenant, "by", who.by, "as", who.as)
	return a, nil
}

// deny denies the held request under key, with a reason, and stores the
// final denied response: a break-glass answer, or an arbitration's
// needs_human decision.
func (sv *Service) deny(ctx context.Context, key, id string, who approver, reason string) (*schemas.BreakGlassApproval, error) {
	answers := sv.topo.Answers
	why := "denied by " + who.by
	if strings.TrimSpace(reason) != "" {
		why += ": " + reason
	}
	// The reason is stored in the approvals and answers buckets and the
	// audit stream: a person's words pass the guard like a tenant's.
	why = guard.Redact(why)
	a, err := decide(ctx, sv.topo.Approvals, key, id, schemas.ApprovalDenied, who, why)
	if err != nil {
		return nil, err
	}
	rec := decisionAudit(a, schemas.BreakGlassDenied, why)
	var resp schemas.Message
	if a.Arbitration != nil {
		resp, err = deniedArbitration(ctx, answers, a, why)
	} else {
		var bg *schemas.BreakGlassResponse
		if bg, err = deniedBreakGlass(ctx, answers, a, why); err == nil {
			rec.ProblemType, resp = bg.ProblemType, bg
		}
	}
	if err != nil {
		return nil, err
	}
	if err := appendAudit(ctx, sv.js, sv.topo.NS, rec); err != nil {
		return nil, err
	}
	if err := putAnswer(ctx, answers, a.Tenant, id, resp); err != nil {
		return nil, err
	}
	sv.log.Info("judge: held request denied", "request", id, "tenant", a.Tenant, "by", who.by, "as", who.as)
	return a, nil
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
	if found, err := getAnswer(ctx, answers, a.Tenant, a.RequestID, &prev); err != nil {
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
	c.resp.Cost.EstimateUSD, c.approver = a.EstimateUSD, approver{by: a.DecidedBy, as: a.DecidedAs}
	var prev schemas.ArbitrationResponse
	if found, err := getAnswer(ctx, answers, a.Tenant, a.RequestID, &prev); err != nil {
		return nil, err
	} else if found {
		c.resp.Cost.BudgetUSD = prev.Cost.BudgetUSD
	}
	c.end(schemas.BreakGlassDenied, why, nil)
	return c.resp, nil
}

// Pending lists the requests waiting for approval, of every tenant: for
// the approver and the admin.
func Pending(ctx context.Context, js jetstream.JetStream, ns bus.Namespace) ([]schemas.BreakGlassApproval, error) {
	topo, err := topology.OpenJudge(ctx, js, topology.JudgeConfig{Namespace: ns})
	if err != nil {
		return nil, err
	}
	lister, err := topo.Approvals.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("judge: list approvals: %w", err)
	}
	var out []schemas.BreakGlassApproval
	guard := DefaultSettings()
	for key := range lister.Keys() {
		a, err := getApproval(ctx, topo.Approvals, key)
		if err == nil && a != nil && a.State == schemas.ApprovalPending {
			out = append(out, *displayApproval(a, &guard)) // only the guarded copy is shown
		}
	}
	return out, nil
}

// approvalServer serves the approval subject: one subscription in the
// judges' queue group and the goroutine that handles its messages, one
// at a time (a decision is a few bus writes).
type approvalServer struct {
	sub  *nats.Subscription
	done chan struct{}
	wg   sync.WaitGroup
}

// serveApprovals subscribes to every identity's approval subject. ctx
// bounds the decisions (its end is a hard stop); stop is the graceful one.
func (sv *Service) serveApprovals(ctx context.Context) (*approvalServer, error) {
	ch := make(chan *nats.Msg, 64)
	sub, err := sv.js.Conn().ChanQueueSubscribe(sv.topo.NS.JudgeApproveFilter(), bus.ConsumerJudges, ch)
	if err != nil {
		return nil, fmt.Errorf("judge: subscribe to approvals: %w", err)
	}
	s := &approvalServer{sub: sub, done: make(chan struct{})}
	s.wg.Go(func() {
		for {
			select {
			case <-s.done:
				return
			case <-ctx.Done():
				return
			case m := <-ch:
				sv.handleApproval(ctx, m)
			}
		}
	})
	return s, nil
}

// stop unsubscribes and waits for the decision in hand. Decisions still
// queued get no reply; their senders time out and may send again (a
// decision is idempotent: the second finds the request decided).
func (s *approvalServer) stop() {
	_ = s.sub.Unsubscribe()
	close(s.done)
	s.wg.Wait()
}

// approvalTimeout bounds one decision's bus writes.
const approvalTimeout = 30 * time.Second

// handleApproval decides one approval message and replies: the updated
// record, or an error status (judgeclient.Decide reads both).
func (sv *Service) handleApproval(ctx context.Context, m *nats.Msg) {
	if m.Reply != "" && !sv.replies.Allow(m) {
		// The reply would be the judge's own publish where the sender
		// may not publish (a tenant's counters, answers; see
		// bus.InboxReply), or go to another identity's inbox than the
		// sender's (auth.CheckReply): refused before anything is done,
		// counted and logged at most once a second.
		return
	}
	ctx, cancel := context.WithTimeout(ctx, approvalTimeout)
	defer cancel()
	as, ok := sv.topo.NS.JudgeApproveIdentity(m.Subject)
	var d schemas.ApprovalDecision
	var err error
	switch {
	case !ok:
		err = fmt.Errorf("%w: subject %q names no identity", ErrDecision, m.Subject)
	default:
		if derr := schemas.Decode(m.Data, &d); derr != nil {
			err = fmt.Errorf("%w: %w", ErrDecision, derr)
		}
	}
	var rec *schemas.BreakGlassApproval
	if err == nil {
		rec, err = sv.decideHeld(ctx, as, &d)
	}
	if err != nil {
		sv.log.Warn("judge: decision refused", "subject", m.Subject, "request", d.RequestID, "err", guard.Redact(err.Error()))
	}
	if m.Reply == "" {
		return
	}
	reply := nats.NewMsg(m.Reply)
	if err != nil {
		reply.Header.Set(judgeclient.ErrorHeader, guard.Redact(err.Error()))
		reply.Header.Set(judgeclient.ErrorCodeHeader, decisionCode(err))
	} else if reply.Data, err = schemas.Encode(rec); err != nil {
		reply.Header.Set(judgeclient.ErrorHeader, err.Error())
		reply.Header.Set(judgeclient.ErrorCodeHeader, judgeclient.CodeFailed)
	}
	if err := m.RespondMsg(reply); err != nil {
		sv.log.Warn("judge: reply to a decision", "err", err)
	}
}

// decisionCode is the status of a refused decision.
func decisionCode(err error) string {
	switch {
	case errors.Is(err, ErrOwnRequest):
		return judgeclient.CodeOwnRequest
	case errors.Is(err, ErrNotPending):
		return judgeclient.CodeNotPending
	case errors.Is(err, ErrDecision):
		return judgeclient.CodeInvalid
	}
	return judgeclient.CodeFailed
}
