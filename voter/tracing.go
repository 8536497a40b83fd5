package voter

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/tracing"
	"github.com/makerfleet/makerfleet/schemas"
)

// Tracing (internal/tracing; all of it no-ops when tracing is off): a
// span "maker.sample" per request handled, the child of the coordinator's
// request span the request's headers name (a request without one, or
// with a malformed one, starts a new trace), with a child
// "maker.model_call" around the model call. The result's headers carry
// the sample span's context back to the coordinator.

// traced wraps h in the request's "maker.sample" span.
func (v *Voter) traced(h bus.Handler) bus.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		if !tracing.Enabled() {
			return h(ctx, msg)
		}
		ctx, span := tracing.Start(tracing.Extract(ctx, msg.Headers()), "maker.sample",
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("maker.voter", v.cfg.ID), attribute.String("messaging.system", "nats")))
		err := h(ctx, msg)
		tracing.Fail(span, err)
		span.End()
		return err
	}
}

// traceReply notes req and its result res on the sample span of ctx and
// puts the span's context in h, the headers of the result's dataLen bytes,
// unless that would bring it near maxPayload (tracing.InjectWithin).
func traceReply(ctx context.Context, req *schemas.SampleRequest, res *schemas.SampleResult, h nats.Header, dataLen int, maxPayload int64) {
	if !tracing.Enabled() {
		return
	}
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("maker.tenant", req.Tenant), attribute.String("maker.job", req.JobID),
			attribute.Int64("maker.step", req.Step), attribute.Int64("maker.epoch", req.Epoch),
			attribute.Int("maker.index", req.Index), attribute.Int("maker.attempt", req.Attempt),
			attribute.String("maker.sample_id", req.SampleID),
			attribute.String("maker.outcome", res.Outcome), attribute.String("maker.red_flag", res.RedFlag))
	}
	if !tracing.InjectWithin(ctx, h, dataLen, maxPayload) && span.IsRecording() {
		span.SetAttributes(attribute.Bool("maker.untraced_payload", true))
	}
}

// traceCall starts the "maker.model_call" span of call; the returned
// function ends it with the call's response and error.
func (v *Voter) traceCall(ctx context.Context, call *llm.Request) (context.Context, func(llm.Response, error)) {
	if !tracing.Enabled() {
		return ctx, func(llm.Response, error) {}
	}
	model := call.Model
	if model == "" {
		model = v.cfg.Model
	}
	ctx, span := tracing.Start(ctx, "maker.model_call", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.request.model", tracing.Clean(model)),
			attribute.Float64("gen_ai.request.temperature", call.Temperature),
			attribute.Int("gen_ai.request.max_tokens", call.MaxTokens)))
	return ctx, func(resp llm.Response, err error) {
		status := "ok"
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled):
			status = "cancelled"
		case errors.Is(err, context.DeadlineExceeded):
			status = "timeout"
		case errors.Is(err, llm.ErrBadResponse):
			status = "bad_response"
		case errors.Is(err, llm.ErrProvider):
			status = "provider_refused"
		case errors.Is(err, llm.ErrPermanent):
			status = "refused"
		default:
			status = "error"
		}
		span.SetAttributes(attribute.String("maker.status", status),
			attribute.String("gen_ai.response.model", tracing.Clean(resp.Model)),
			attribute.Int("gen_ai.usage.input_tokens", resp.PromptTokens),
			attribute.Int("gen_ai.usage.output_tokens", resp.CompletionTokens))
		if len(resp.Choices) > 0 {
			span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{tracing.Clean(resp.Choices[0].FinishReason)}))
		}
		if status != "cancelled" {
			tracing.Fail(span, err)
		}
		span.End()
	}
}
