package judge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
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
	data, err := schemas.Encode(req)
	if err != nil {
		return nil, err
	}
	if len(data) > schemas.MaxMessageBytes {
		return nil, fmt.Errorf("%w: the request is %d bytes, over the %d-byte message limit: send fewer or smaller files", schemas.ErrInvalid, len(data), schemas.MaxMessageBytes)
	}
	topo, err := bus.EnsureJudge(ctx, js, bus.JudgeConfig{Namespace: ns})
	if err != nil {
		return nil, err
	}
	// Watch before publishing, so the answer cannot slip past.
	w, err := topo.Answers.Watch(ctx, req.RequestID)
	if err != nil {
		return nil, fmt.Errorf("judge: watch answer: %w", err)
	}
	defer func() { _ = w.Stop() }()
	if _, err := js.Publish(ctx, ns.JudgeSubject(req.Tenant), data, jetstream.WithMsgID(req.RequestID)); err != nil {
		return nil, fmt.Errorf("judge: publish request: %w", err)
	}
	held := false
	for {
		select {
		case <-ctx.Done():
			if held {
				return nil, fmt.Errorf("judge: %s still waits for approval (maker judge approve %s): %w", req.RequestID, req.RequestID, ctx.Err())
			}
			return nil, fmt.Errorf("judge: no answer to %s: %w", req.RequestID, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("judge: answer watch closed")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var r schemas.BreakGlassResponse
			if err := schemas.Decode(e.Value(), &r); err != nil {
				return nil, fmt.Errorf("judge: answer of %s: %w", req.RequestID, err)
			}
			if !schemas.FinalBreakGlassOutcome(r.Outcome) {
				if !held && o.onHeld != nil {
					o.onHeld(&r)
				}
				held = true
				continue
			}
			return &r, ResponseError(&r)
		}
	}
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

// NewRequestID returns a fresh request id: prefix, the time and random
// digits.
func NewRequestID(prefix string) string {
	return prefix + "-" + time.Now().UTC().Format("20060102T150405") + "-" + newNonce()
}
