// Package tracing is the fleet's optional OpenTelemetry tracing: off by
// default, on when a role is given an OTLP endpoint (maker --otlp-endpoint).
//
// Setup installs a tracer provider that batches spans to an OTLP/HTTP
// collector; until it is called (and after its shutdown) every helper
// here is a no-op that allocates nothing and writes no header, so a fleet
// without tracing pays one atomic load per publish and per handled
// message.
//
// Trace context travels in NATS message headers as W3C Trace Context
// (traceparent, tracestate), through Inject and Extract:
//   - the coordinator starts a root span "maker.step" per step and a child
//     "maker.sample_request" per published sample request, whose context
//     goes in the request's headers;
//   - the voter's "maker.sample" span (one per request handled) is that
//     span's child, with a child "maker.model_call" around the model call;
//     the voter puts the sample span's context in the result's headers and
//     the coordinator links the step span to it.
//
// Headers are data: a missing, malformed or forged traceparent is ignored
// (the voter's span starts a new trace), and trace headers are never part
// of a message's identity (Nats-Msg-Id) or of its authorization.
package tracing
