package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Header names of W3C Trace Context.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// propagator is W3C Trace Context only: baggage is not carried.
var propagator = propagation.TraceContext{}

// HeaderCarrier adapts a NATS message's headers to a TextMapCarrier.
// NATS header names are case-sensitive: the W3C names are used as they
// are, lower case.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value alone.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes ctx's span context into h (traceparent, and tracestate
// when there is one). It writes nothing when tracing is off or ctx holds
// no valid span context; h must not be nil then.
func Inject(ctx context.Context, h nats.Header) {
	if !Enabled() || h == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx with the remote span context h carries, for a span
// started from it to be its child. A missing or malformed traceparent
// (or tracing off) leaves ctx as it is.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if !Enabled() || len(h) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// Remote is the span context h carries (invalid when none, or tracing
// off): what a link to the sender's span needs.
func Remote(h nats.Header) trace.SpanContext {
	if !Enabled() || len(h) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagator.Extract(context.Background(), HeaderCarrier(h)))
}

// PayloadHeadroom is kept free under a connection's max payload when
// trace headers are added: they are never what pushes a message over it.
const PayloadHeadroom = 1024

// InjectWithin is Inject for a message of dataLen data bytes with headers
// h, sent on a connection whose max payload (headers included) is
// maxPayload: when the message with the trace headers would be larger
// than maxPayload - PayloadHeadroom it writes none (the message goes
// untraced rather than refused), and reports whether it wrote them.
func InjectWithin(ctx context.Context, h nats.Header, dataLen int, maxPayload int64) bool {
	if !Enabled() || h == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return false
	}
	trc := nats.Header{}
	propagator.Inject(ctx, HeaderCarrier(trc))
	if int64(dataLen+headerBytes(h)+headerBytes(trc)) > maxPayload-PayloadHeadroom {
		return false
	}
	for k, v := range trc {
		h[k] = v
	}
	return true
}

// headerBytes is what h takes on the wire ("NATS/1.0\r\n", a line per
// value, the closing "\r\n"), near enough: the status line is counted once
// even for h's part of a message.
func headerBytes(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}
