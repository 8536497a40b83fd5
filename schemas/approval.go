package schemas

import (
	"strings"
	"time"
)

// Approval states.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
)

// BreakGlassApproval is a request held for a person's approval, stored in
// the approvals bucket under <tenant>.<request id>: a break-glass request
// (Request) or an arbitration (Arbitration, whose session is the job id).
// `maker judge approve|deny ID` sends an ApprovalDecision, and a judge
// moves it from pending to approved or denied.
type BreakGlassApproval struct {
	Header
	// RequestID, Tenant and Session are the held request's.
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	Session   string `json:"session"`
	// State is pending, approved or denied.
	State string `json:"state" jsonschema:"enum=pending,enum=approved,enum=denied"`
	// EstimateUSD is the estimate that triggered the hold.
	EstimateUSD float64 `json:"estimate_usd"`
	// Reason says why the request was held (or denied).
	Reason string `json:"reason"`
	// DecidedBy is who approved or denied (the person's name);
	// DecidedAs the identity they did it as, never the requester's.
	DecidedBy string `json:"decided_by,omitempty"`
	DecidedAs string `json:"decided_as,omitempty"`
	// Request or Arbitration (exactly one) is the held request,
	// re-published on approval.
	Request     *BreakGlassRequest  `json:"request,omitempty"`
	Arbitration *ArbitrationRequest `json:"arbitration,omitempty"`
	// RequestedAt is when the hold began; DecidedAt when a person decided
	// (zero while pending).
	RequestedAt time.Time `json:"requested_at"`
	DecidedAt   time.Time `json:"decided_at"`
}

// MessageKind implements Message.
func (*BreakGlassApproval) MessageKind() string { return KindBreakGlassApproval }

// Validate implements Message.
func (a *BreakGlassApproval) Validate() error {
	const k = KindBreakGlassApproval
	if err := a.Header.check(k); err != nil {
		return err
	}
	if err := checkRequestIDs(k, a.RequestID, a.Tenant, a.Session); err != nil {
		return err
	}
	switch a.State {
	case ApprovalPending:
	case ApprovalApproved, ApprovalDenied:
		if strings.TrimSpace(a.DecidedBy) == "" {
			return invalid(k, "an %s approval names who decided (decided_by)", a.State)
		}
	default:
		return invalid(k, "unknown state %q", a.State)
	}
	if err := nonNegativeFigures(k, figure{"estimate_usd", a.EstimateUSD}); err != nil {
		return err
	}
	var id, tenant, session string
	switch r, arb := a.Request, a.Arbitration; {
	case r != nil && arb == nil:
		if err := r.Validate(); err != nil {
			return err
		}
		id, tenant, session = r.RequestID, r.Tenant, r.Session
	case arb != nil && r == nil:
		if err := arb.Validate(); err != nil {
			return err
		}
		id, tenant, session = arb.RequestID, arb.Tenant, arb.JobID
	default:
		return invalid(k, "an approval holds exactly one of request and arbitration")
	}
	if id != a.RequestID || tenant != a.Tenant || session != a.Session {
		return invalid(k, "request_id, tenant and session must match the held request's")
	}
	return nil
}

// Approval decisions.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// ApprovalDecision is a person's approval or denial of a held request,
// sent as a core NATS request on the approval subject of the identity
// deciding (maker.v1.judge_approve.<identity>). A judge answers with the
// updated BreakGlassApproval, or with no body and the headers
// Nats-Service-Error and Nats-Service-Error-Code (400 invalid, 403 the
// requester's own, 404 not held, 409 already decided, 500 failed).
type ApprovalDecision struct {
	Header
	// RequestID is the held request's id.
	RequestID string `json:"request_id"`
	// Tenant is the held request's tenant; optional when the id is held
	// for one tenant only.
	Tenant string `json:"tenant,omitempty"`
	// Decision is approve or deny.
	Decision string `json:"decision" jsonschema:"enum=approve,enum=deny"`
	// By names the person deciding, for the audit trail.
	By string `json:"by"`
	// Reason says why (a denial's is told to the asker).
	Reason string `json:"reason,omitempty"`
}

// MessageKind implements Message.
func (*ApprovalDecision) MessageKind() string { return KindApprovalDecision }

// Validate implements Message.
func (d *ApprovalDecision) Validate() error {
	const k = KindApprovalDecision
	if err := d.Header.check(k); err != nil {
		return err
	}
	if !jobIDRE.MatchString(d.RequestID) {
		return invalid(k, "request_id %q must be 1-64 characters of A-Z, a-z, 0-9, '_' and '-', starting with a letter or digit", d.RequestID)
	}
	if d.Tenant != "" {
		if err := ValidTenant(d.Tenant); err != nil {
			return err
		}
	}
	switch d.Decision {
	case DecisionApprove, DecisionDeny:
	default:
		return invalid(k, "decision %q is not approve or deny", d.Decision)
	}
	if strings.TrimSpace(d.By) == "" {
		return invalid(k, "by names who decides")
	}
	if len(d.By) > 200 || len(d.Reason) > 2000 {
		return invalid(k, "by (200 bytes) or reason (2000 bytes) is too long")
	}
	return nil
}
