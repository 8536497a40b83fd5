package coordinator

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/makerfleet/makerfleet/internal/tracing"
	"github.com/makerfleet/makerfleet/schemas"
)

// The winning vote key is tenant data (the answer): a step span keeps
// only its length and a short hash (voteHash), never the answer itself,
// so tenants' answers do not reach the tracing backend.

// stepTrace is a job run's tracing (internal/tracing; every method is a
// no-op when tracing is off): a root span "maker.step" per step, started
// with the step's first sample request and ended when the step's decision
// is journaled (or the run stops), and a child "maker.sample_request" per
// request published, whose context the request's headers carry to the
// voter. Owned by the job's goroutine.
type stepTrace struct {
	step   int64           // the last step a span was opened for
	opened bool            // step is set
	ctx    context.Context // holds span
	span   trace.Span      // nil: no step span open
}

// request starts the span of req, published with headers h and dataLen
// bytes of data, under the step's span (opened here for the step's first
// request), and puts its context in h unless that would bring the message
// near the connection's max payload (tracing.InjectWithin).
func (t *stepTrace) request(r *jobRun, req *schemas.SampleRequest, h nats.Header, dataLen int) {
	if !tracing.Enabled() {
		return
	}
	switch {
	case t.opened && (req.Step < t.step || req.Step == t.step && t.span == nil):
		return // a late request of a step traced and ended: untraced
	case t.span == nil || t.step != req.Step:
		t.end("superseded")
		t.step, t.opened = req.Step, true
		t.ctx, t.span = tracing.Start(context.Background(), "maker.step", trace.WithNewRoot(),
			trace.WithAttributes(
				attribute.String("maker.tenant", req.Tenant), attribute.String("maker.job", req.JobID),
				attribute.Int64("maker.step", req.Step), attribute.Int("maker.k", r.m.K()),
				attribute.String("maker.coordinator", r.c.cfg.ID), attribute.Int64("maker.lease_token", r.token)))
	}
	ctx, span := tracing.Start(t.ctx, "maker.sample_request", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("maker.sample_id", req.SampleID), attribute.Int("maker.index", req.Index),
			attribute.Int("maker.attempt", req.Attempt), attribute.Int64("maker.epoch", req.Epoch),
			attribute.String("maker.model", tracing.Clean(req.Model)),
			attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", r.sampleSj)))
	if !tracing.InjectWithin(ctx, h, dataLen, r.c.nc.MaxPayload()) {
		span.SetAttributes(attribute.Bool("maker.untraced_payload", true))
	}
	span.End()
}

// results links the open step's span to the voters' spans of msgs, the
// results in hand (those of other steps, or without trace context, are
// not linked).
func (t *stepTrace) results(msgs []jetstream.Msg) {
	if t.span == nil || !t.span.IsRecording() {
		return
	}
	id := t.span.SpanContext().TraceID()
	for _, msg := range msgs {
		if sc := tracing.Remote(msg.Headers()); sc.IsValid() && sc.TraceID() == id {
			t.span.AddLink(trace.Link{SpanContext: sc})
		}
	}
}

// journaled ends the step's span when e decides it, with the decision;
// an escalation is an event on it.
func (t *stepTrace) journaled(e *schemas.JournalEntry) {
	if t.span == nil || e.Step != t.step {
		if t.span != nil && e.Type == schemas.EntryEnd {
			t.end("job ended")
		}
		return
	}
	switch e.Type {
	case schemas.EntryEscalation:
		t.span.AddEvent("maker.escalation", trace.WithAttributes(attribute.String("maker.rung", e.Rung)))
	case schemas.EntryDecision, schemas.EntryArbiter:
		rung := e.Rung
		if rung == "" {
			rung = schemas.RungOwnModel
		}
		t.span.SetAttributes(
			attribute.String("maker.vote_hash", tracing.Hash(e.VoteKey)), attribute.Int("maker.vote_bytes", len(e.VoteKey)),
			attribute.String("maker.rung", rung),
			attribute.Int("maker.votes", e.Votes), attribute.Int("maker.lead", e.Lead),
			attribute.Int("maker.samples", e.Counted), attribute.Int("maker.valid", e.Valid),
			attribute.Int("maker.red_flagged", e.RedFlagged), attribute.Int64("maker.epoch", e.Epoch))
		t.span.End()
		t.span, t.ctx = nil, nil
	case schemas.EntryEnd:
		t.end("job ended")
	}
}

// end ends the open step's span, if any, undecided (why).
func (t *stepTrace) end(why string) {
	if t.span == nil {
		return
	}
	t.span.SetAttributes(attribute.String("maker.undecided", why))
	t.span.End()
	t.span, t.ctx = nil, nil
}
