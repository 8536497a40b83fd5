// Package judgeclient asks the judges over NATS: break-glass requests
// (Ask) and the coordinator's arbitrations of voting steps (Arbitrate).
//
// It is all a caller needs and nothing of the judge role itself (settings,
// secrets, panels, model clients), so the coordinator and the CLI's asking
// commands depend on it, not on package judge.
//
// Produces (names of the default namespace; see bus.Namespace):
//   - break-glass requests (schemas.BreakGlassRequest) on
//     maker.v1.judge.<tenant>, stream MAKER_JUDGE;
//   - arbitration requests (schemas.ArbitrationRequest) on
//     maker.v1.arbitrate.<tenant>, stream MAKER_ARBITRATE;
//
// each with <tenant>.<request id> as Nats-Msg-Id, then watches the key
// <tenant>.<request id> in KV bucket maker_judge_answers for the judges'
// answer (schemas.BreakGlassResponse or schemas.ArbitrationResponse): a
// client reads only its own tenant's answers (Answer), which a server's
// permissions can enforce by key;
//   - a person's approvals and denials of held requests
//     (schemas.ApprovalDecision, Decide) on
//     maker.v1.judge_approve.<identity>, as core NATS requests a judge
//     replies to.
package judgeclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// Sentinel errors of a final break-glass response (ResponseError).
var (
	// ErrRefused: a gate refused the request; the response's Reason says
	// which.
	ErrRefused = errors.New("judge: request refused")
	// ErrDenied: a person denied the held request.
	ErrDenied = errors.New("judge: request denied")
	// ErrFailed: the panel produced no answer (every member failed).
	ErrFailed = errors.New("judge: no answer")
	// ErrNoAnswer: there is no answer to the id for the tenant: never
	// asked, or asked by another tenant (an answer is readable only by its
	// own tenant).
	ErrNoAnswer = errors.New("judge: no answer for this tenant")
)

// Sentinel errors of a decision (Decide).
var (
	// ErrNotPending: no request of that id waits for approval (unknown,
	// or decided already).
	ErrNotPending = errors.New("judge: request is not pending approval")
	// ErrOwnRequest: the identity deciding is the one that asked for the
	// call; a requester never approves or denies its own.
	ErrOwnRequest = errors.New("judge: a requester cannot decide its own held request")
	// ErrInvalidDecision: the judge found the decision malformed or
	// ambiguous (the message says why).
	ErrInvalidDecision = errors.New("judge: invalid decision")
	// ErrNoJudge: no judge answered the decision.
	ErrNoJudge = errors.New("judge: no judge is serving approvals")
)

// A judge's reply to a refused decision carries no body and these
// headers (the NATS services convention): the reason, and its code.
const (
	ErrorHeader     = "Nats-Service-Error"
	ErrorCodeHeader = "Nats-Service-Error-Code"

	CodeInvalid    = "400"
	CodeOwnRequest = "403"
	CodeNotPending = "404"
	CodeFailed     = "500"
)

// MsgID is the Nats-Msg-Id of tenant's request id: the tenant's own, so
// that no other tenant can pre-empt it (the stream drops a second message
// of an id as a duplicate).
func MsgID(tenant, id string) string { return tenant + "." + id }

// AskOption configures Ask.
type AskOption func(*askOptions)

type askOptions struct {
	onHeld    func(*schemas.BreakGlassResponse)
	sendWhole time.Duration
}

// SendWhole makes Ask send the request even when ctx ends while it is
// being sent, for up to bound: a caller that gives up then (an MCP
// client's timeout or cancel, a Ctrl-C) still has its request run, once,
// and a retry with the same id joins it, instead of a request that may or
// may not be on the bus. Ask stops waiting for the answer when ctx ends.
func SendWhole(bound time.Duration) AskOption {
	return func(o *askOptions) { o.sendWhole = bound }
}

// OnHeld is called when the request is held for a person's approval; Ask
// keeps waiting for the final answer (until ctx ends).
func OnHeld(fn func(*schemas.BreakGlassResponse)) AskOption {
	return func(o *askOptions) { o.onHeld = fn }
}

// Ask sends a break-glass request to the judges of namespace ns and waits
// until ctx ends for its final response. It fills the header and
// SubmittedAt when unset. The response is returned with a nil error when
// answered or degraded; with an error matching ErrRefused, ErrDenied or
// ErrFailed (its reason in the message) otherwise; a nil response and an
// error when the request is invalid or the bus failed.
//
// Ask is safe to call again with the same request id: the answer is
// stored under it, and a request already answered is not run twice.
func Ask(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, req *schemas.BreakGlassRequest, opts ...AskOption) (*schemas.BreakGlassResponse, error) {
	var o askOptions
	for _, opt := range opts {
		opt(&o)
	}
	if req.Kind == "" {
		req.Header = schemas.NewHeader(schemas.KindBreakGlassRequest)
	}
	if req.SubmittedAt.IsZero() {
		req.SubmittedAt = time.Now().UTC()
	}
	r, err := send(ctx, js, ns, ns.JudgeSubject(req.Tenant), req.Tenant, req.RequestID, req,
		func(r *schemas.BreakGlassResponse) bool { return schemas.FinalBreakGlassOutcome(r.Outcome) }, o.onHeld, o.sendWhole)
	if err != nil {
		return nil, err
	}
	return r, ResponseError(r)
}

// ResponseError returns the error that goes with a final response: nil
// for answered and degraded, else ErrRefused, ErrDenied or ErrFailed with
// the reason.
func ResponseError(r *schemas.BreakGlassResponse) error {
	switch r.Outcome {
	case schemas.BreakGlassRefused:
		return fmt.Errorf("%w: %s", ErrRefused, r.Reason)
	case schemas.BreakGlassDenied:
		return fmt.Errorf("%w: %s", ErrDenied, r.Reason)
	case schemas.BreakGlassFailed:
		return fmt.Errorf("%w: %s", ErrFailed, r.Reason)
	}
	return nil
}

// Arbitrate asks the judges of namespace ns to settle a voting step and
// waits until ctx ends for the step's decision: decided, with one of the
// request's candidates, or needs_human, with the reason (a refusal, a
// denial, a failure, a degraded or unconfident answer). It fills the
// header, the request id (schemas.ArbitrationRequestID) and SubmittedAt
// when unset.
//
// An error means the request cannot be sent (matching schemas.ErrInvalid:
// nothing was published), the bus failed or ctx ended; a held request that
// is still waiting when ctx ends says so in the error. Asking again for
// the same step reads the stored answer.
func Arbitrate(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, req *schemas.ArbitrationRequest) (*schemas.ArbiterDecision, error) {
	if req.Kind == "" {
		req.Header = schemas.NewHeader(schemas.KindArbitrationRequest)
	}
	if req.RequestID == "" {
		req.RequestID = schemas.ArbitrationRequestID(req.Tenant, req.JobID, req.Step)
	}
	if req.SubmittedAt.IsZero() {
		req.SubmittedAt = time.Now().UTC()
	}
	r, err := send(ctx, js, ns, ns.ArbitrateSubject(req.Tenant), req.Tenant, req.RequestID, req,
		func(r *schemas.ArbitrationResponse) bool { return r.Outcome != schemas.BreakGlassHeld }, nil, 0)
	if err != nil {
		return nil, err
	}
	return decisionFor(req, r.Decision), nil
}

// decisionFor returns the stored decision d for req. The answer under the
// step's request id may be one to another request for the same step (a
// forged one, with other candidates or a lower bar): a decision that is
// not one of req's candidates, or was judged against a lower confidence
// than req asks, does not decide req's step.
func decisionFor(req *schemas.ArbitrationRequest, d *schemas.ArbiterDecision) *schemas.ArbiterDecision {
	if d.Outcome != schemas.ArbiterDecided {
		return d
	}
	why := ""
	switch {
	case !slices.ContainsFunc(req.Candidates, func(c schemas.TallyEntry) bool { return c.VoteKey == d.VoteKey }):
		why = "the stored decision chose a vote key that is not one of this step's candidates"
	case d.Threshold < req.MinConfidence:
		why = fmt.Sprintf("the stored decision was judged against min confidence %.2f, below this job's %.2f", d.Threshold, req.MinConfidence)
	default:
		return d
	}
	out := *d
	out.Outcome, out.VoteKey, out.Threshold = schemas.ArbiterNeedsHuman, "", req.MinConfidence
	out.Reason = why + " (was the request under " + req.RequestID + " another one?)"
	return &out
}

// send publishes tenant's request req with id on subject and waits for
// the final answer stored under the tenant's key of id: final tells a
// final answer from a held one, onHeld (optional) hears of the first held
// one. With whole > 0 the request is sent under a context ctx's end does
// not cancel, bounded by whole (SendWhole).
func send[R any, PR interface {
	*R
	schemas.Message
}](ctx context.Context, js jetstream.JetStream, ns bus.Namespace, subject, tenant, id string, req schemas.Message, final func(PR) bool, onHeld func(PR), whole time.Duration) (PR, error) {
	data, err := encodeRequest(req)
	if err != nil {
		return nil, err
	}
	sctx, wctx := ctx, ctx
	if whole > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), whole)
		defer cancel()
		// The watch lives until it is stopped below, not until ctx ends.
		wctx = context.WithoutCancel(ctx)
	}
	topo, err := topology.EnsureJudge(sctx, js, topology.JudgeConfig{Namespace: ns})
	if err != nil {
		return nil, err
	}
	// Watch before publishing, so the answer cannot slip past.
	w, err := topo.Answers.Watch(wctx, bus.JudgeAnswerKey(tenant, id))
	if err != nil {
		return nil, fmt.Errorf("judge: watch answer: %w", err)
	}
	defer func() { _ = w.Stop() }()
	if err := publish(sctx, js, subject, tenant, id, data); err != nil {
		return nil, err
	}
	held := false
	for {
		r, err := nextAnswer[R, PR](ctx, w, id)
		if err != nil {
			if held && ctx.Err() != nil {
				return nil, fmt.Errorf("judge: %s still waits for approval (maker judge approve %s): %w", id, id, ctx.Err())
			}
			return nil, err
		}
		if final(r) {
			return r, nil
		}
		if !held && onHeld != nil {
			onHeld(r)
		}
		held = true
	}
}

// encodeRequest encodes a request and checks it fits a message.
func encodeRequest(req schemas.Message) ([]byte, error) {
	data, err := schemas.Encode(req)
	if err != nil {
		return nil, err
	}
	if len(data) > schemas.MaxMessageBytes {
		return nil, fmt.Errorf("%w: the request is %d bytes, over the %d-byte message limit: send less context", schemas.ErrInvalid, len(data), schemas.MaxMessageBytes)
	}
	return data, nil
}

// publish stores tenant's request id on subject, under the tenant's own
// message id.
func publish(ctx context.Context, js jetstream.JetStream, subject, tenant, id string, data []byte) error {
	if _, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(MsgID(tenant, id))); err != nil {
		return fmt.Errorf("judge: publish request: %w", err)
	}
	return nil
}

// nextAnswer returns the next answer the watch w of id's key delivers
// (held or final), or an error when ctx ends first.
func nextAnswer[R any, PR interface {
	*R
	schemas.Message
}](ctx context.Context, w jetstream.KeyWatcher, id string) (PR, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("judge: no answer to %s: %w", id, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("judge: answer watch closed")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			r := PR(new(R))
			if err := schemas.Decode(e.Value(), r); err != nil {
				return nil, fmt.Errorf("judge: answer of %s: %w", id, err)
			}
			return r, nil
		}
	}
}

// Post sends a break-glass request to the judges of namespace ns without
// waiting for the answer (Await reads it): for a client that may not
// create the judge's topology (maker serve's api identity), so the
// judge's streams must exist (topology.ErrNoJudge otherwise). It fills the
// header and SubmittedAt when unset.
func Post(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, req *schemas.BreakGlassRequest) error {
	if req.Kind == "" {
		req.Header = schemas.NewHeader(schemas.KindBreakGlassRequest)
	}
	if req.SubmittedAt.IsZero() {
		req.SubmittedAt = time.Now().UTC()
	}
	if err := req.Validate(); err != nil {
		return err
	}
	data, err := encodeRequest(req)
	if err != nil {
		return err
	}
	if _, err := topology.OpenJudge(ctx, js, topology.JudgeConfig{Namespace: ns}); err != nil {
		return err
	}
	return publish(ctx, js, ns.JudgeSubject(req.Tenant), req.Tenant, req.RequestID, data)
}

// Await returns tenant's answer to request id, held or final: a final
// one at once; otherwise, for up to wait, the first final one stored, and
// when wait has passed the held one stored by then. ErrNoAnswer when none
// is stored by then (never asked, asked by another tenant, or still
// queued for a judge).
func Await(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, tenant, id string, wait time.Duration) (*schemas.BreakGlassResponse, error) {
	topo, err := topology.OpenJudge(ctx, js, topology.JudgeConfig{Namespace: ns})
	if err != nil {
		return nil, err
	}
	var last *schemas.BreakGlassResponse
	e, err := topo.Answers.Get(ctx, bus.JudgeAnswerKey(tenant, id))
	switch {
	case err == nil:
		last = new(schemas.BreakGlassResponse)
		if err := schemas.Decode(e.Value(), last); err != nil {
			return nil, fmt.Errorf("judge: answer of %s: %w", id, err)
		}
		if schemas.FinalBreakGlassOutcome(last.Outcome) {
			return last, nil
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, fmt.Errorf("judge: read answer %s: %w", id, err)
	}
	if wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		// A watch delivers the stored answer first, so none slips past.
		w, err := topo.Answers.Watch(wctx, bus.JudgeAnswerKey(tenant, id))
		if err != nil {
			return nil, fmt.Errorf("judge: watch answer: %w", err)
		}
		defer func() { _ = w.Stop() }()
		for {
			r, err := nextAnswer[schemas.BreakGlassResponse](wctx, w, id)
			if err != nil {
				if ctx.Err() != nil || wctx.Err() == nil {
					return nil, err
				}
				break
			}
			if schemas.FinalBreakGlassOutcome(r.Outcome) {
				return r, nil
			}
			last = r
		}
	}
	if last == nil {
		return nil, fmt.Errorf("%w: no request %q of tenant %s has an answer (yet)", ErrNoAnswer, id, tenant)
	}
	return last, nil
}

// Answer reads the stored answer of tenant's request id into r (a
// *schemas.BreakGlassResponse or *schemas.ArbitrationResponse), held or
// final. An id tenant never asked for, even one another tenant did, is
// ErrNoAnswer: the answers are keyed by tenant.
func Answer(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, tenant, id string, r schemas.Message) error {
	topo, err := topology.OpenJudge(ctx, js, topology.JudgeConfig{Namespace: ns})
	if err != nil {
		return err
	}
	e, err := topo.Answers.Get(ctx, bus.JudgeAnswerKey(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: no request %q of tenant %s has an answer", ErrNoAnswer, id, tenant)
	}
	if err != nil {
		return fmt.Errorf("judge: read answer %s: %w", id, err)
	}
	if err := schemas.Decode(e.Value(), r); err != nil {
		return fmt.Errorf("judge: answer of %s: %w", id, err)
	}
	return nil
}

// Decide sends a person's decision d on a held request to the judges of
// namespace ns, as identity as (the subject maker.v1.judge_approve.<as>,
// which a secured server lets only that identity publish on), and returns
// the updated approval record. It fills d's header when unset. Refusals
// match ErrNotPending, ErrOwnRequest or ErrInvalidDecision; ErrNoJudge when
// no judge serves approvals.
func Decide(ctx context.Context, nc *nats.Conn, ns bus.Namespace, as string, d *schemas.ApprovalDecision) (*schemas.BreakGlassApproval, error) {
	if d.Kind == "" {
		d.Header = schemas.NewHeader(schemas.KindApprovalDecision)
	}
	if as == "" || strings.ContainsAny(as, ".*> \t") {
		return nil, fmt.Errorf("%w: identity %q is not one NATS subject token", schemas.ErrInvalid, as)
	}
	data, err := schemas.Encode(d)
	if err != nil {
		return nil, err
	}
	m, err := nc.RequestWithContext(ctx, ns.JudgeApproveSubject(as), data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w (namespace %s): start a judge (maker judge)", ErrNoJudge, ns)
	}
	if err != nil {
		return nil, fmt.Errorf("judge: send decision: %w", err)
	}
	if code := m.Header.Get(ErrorCodeHeader); code != "" {
		why := m.Header.Get(ErrorHeader)
		switch code {
		case CodeOwnRequest:
			return nil, fmt.Errorf("%w: %s", ErrOwnRequest, why)
		case CodeNotPending:
			return nil, fmt.Errorf("%w: %s", ErrNotPending, why)
		case CodeInvalid:
			return nil, fmt.Errorf("%w: %s", ErrInvalidDecision, why)
		}
		return nil, fmt.Errorf("judge: decision failed (%s): %s", code, why)
	}
	var rec schemas.BreakGlassApproval
	if err := schemas.Decode(m.Data, &rec); err != nil {
		return nil, fmt.Errorf("judge: decision reply: %w", err)
	}
	return &rec, nil
}

// NewRequestID returns a fresh break-glass request id: prefix, the time
// and random digits.
func NewRequestID(prefix string) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(errors.New("judge: no randomness: " + err.Error()))
	}
	return prefix + "-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b)
}
