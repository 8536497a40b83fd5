// Package judgeclient asks the judges over NATS: break-glass requests
// (Ask).
//
// It is all an asker needs and nothing of the judge role itself
// (settings, secrets, panels, model clients), so the CLI's asking commands
// depend on it, not on package judge.
//
// Produces (names of the default namespace; see bus.Namespace):
// break-glass requests (schemas.BreakGlassRequest) on
// maker.v1.judge.<tenant>, stream MAKER_JUDGE, with the request id as
// Nats-Msg-Id, then watches the request id in KV bucket
// maker_judge_answers for the judges' answer (schemas.BreakGlassResponse).
package judgeclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
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
)

// AskOption configures Ask.
type AskOption func(*askOptions)

type askOptions struct {
	onHeld func(*schemas.BreakGlassResponse)
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
	r, err := send(ctx, js, ns, ns.JudgeSubject(req.Tenant), req.RequestID, req,
		func(r *schemas.BreakGlassResponse) bool { return schemas.FinalBreakGlassOutcome(r.Outcome) }, o.onHeld)
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

// send publishes req on subject with id as its message id and waits for
// the final answer stored under id: final tells a final answer from a held
// one, onHeld (optional) hears of the first held one.
func send[R any, PR interface {
	*R
	schemas.Message
}](ctx context.Context, js jetstream.JetStream, ns bus.Namespace, subject, id string, req schemas.Message, final func(PR) bool, onHeld func(PR)) (PR, error) {
	data, err := schemas.Encode(req)
	if err != nil {
		return nil, err
	}
	if len(data) > schemas.MaxMessageBytes {
		return nil, fmt.Errorf("%w: the request is %d bytes, over the %d-byte message limit: send less context", schemas.ErrInvalid, len(data), schemas.MaxMessageBytes)
	}
	topo, err := bus.EnsureJudge(ctx, js, bus.JudgeConfig{Namespace: ns})
	if err != nil {
		return nil, err
	}
	// Watch before publishing, so the answer cannot slip past.
	w, err := topo.Answers.Watch(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("judge: watch answer: %w", err)
	}
	defer func() { _ = w.Stop() }()
	if _, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(id)); err != nil {
		return nil, fmt.Errorf("judge: publish request: %w", err)
	}
	held := false
	for {
		select {
		case <-ctx.Done():
			if held {
				return nil, fmt.Errorf("judge: %s still waits for approval (maker judge approve %s): %w", id, id, ctx.Err())
			}
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
			if final(r) {
				return r, nil
			}
			if !held && onHeld != nil {
				onHeld(r)
			}
			held = true
		}
	}
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
