package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the fleet's spans.
const ScopeName = "github.com/makerfleet/makerfleet"

// tracesPath is appended to an endpoint that does not already name it, as
// for $OTEL_EXPORTER_OTLP_ENDPOINT.
const tracesPath = "/v1/traces"

// Config configures Setup.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's base URL, e.g.
	// http://127.0.0.1:4318: spans are posted to Endpoint + /v1/traces (a
	// URL whose path already ends in /v1/traces is used as it is). http://
	// sends in clear text, https:// over TLS. Required unless Exporter is
	// set.
	Endpoint string
	// ServiceName is the resource's service.name. Default "maker".
	ServiceName string
	// InstanceID is the resource's service.instance.id (a coordinator or
	// voter id). Default host-pid.
	InstanceID string
	// Version is the resource's service.version. Default none.
	Version string
	// SampleRatio is the fraction of new traces (steps) recorded, in
	// (0, 1]; a span with a remote parent follows its parent's choice.
	// Default 1: every step.
	SampleRatio float64
	// Exporter, when set, receives the spans instead of an OTLP endpoint,
	// each as it ends (tests: tracetest.NewInMemoryExporter).
	Exporter sdktrace.SpanExporter
}

// provider is the installed tracer provider's tracer; nil when tracing is
// off.
var provider atomic.Pointer[installed]

type installed struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// Enabled reports whether Setup installed a provider (and it is not shut
// down). Callers guard the work of building span attributes with it.
func Enabled() bool { return provider.Load() != nil }

// Setup installs a tracer provider as cfg says, as this package's and the
// OpenTelemetry global one, and returns the function that flushes the
// spans still buffered and uninstalls it (call it once, at exit; the
// global provider is left to the shut-down provider, which records
// nothing). Only one provider is installed at a time: a second Setup
// replaces the first.
func Setup(ctx context.Context, cfg Config) (shutdown func(context.Context) error, err error) {
	if cfg.ServiceName == "" {
		cfg.ServiceName = "maker"
	}
	if cfg.InstanceID == "" {
		host, _ := os.Hostname()
		cfg.InstanceID = host + "-" + strconv.Itoa(os.Getpid())
	}
	if cfg.SampleRatio == 0 {
		cfg.SampleRatio = 1
	}
	if !(cfg.SampleRatio > 0 && cfg.SampleRatio <= 1) {
		return nil, fmt.Errorf("tracing: sample ratio %v is not in (0, 1]", cfg.SampleRatio)
	}
	var opt sdktrace.TracerProviderOption
	switch {
	case cfg.Exporter != nil:
		opt = sdktrace.WithSyncer(cfg.Exporter)
	case cfg.Endpoint == "":
		return nil, errors.New("tracing: no endpoint")
	default:
		u, err := TracesURL(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u))
		if err != nil {
			return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
		}
		opt = sdktrace.WithBatcher(exp)
	}
	attrs := []attribute.KeyValue{
		attribute.String("service.name", cfg.ServiceName),
		attribute.String("service.instance.id", cfg.InstanceID),
	}
	if cfg.Version != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.Version))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(opt, sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))))
	in := &installed{tp: tp, tracer: tp.Tracer(ScopeName)}
	provider.Store(in)
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		provider.CompareAndSwap(in, nil)
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("tracing: shutdown: %w", err)
		}
		return nil
	}, nil
}

// TracesURL is the URL spans are posted to for endpoint (see
// Config.Endpoint).
func TracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("tracing: endpoint: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("tracing: endpoint %q: want http://HOST:PORT or https://HOST:PORT", endpoint)
	}
	if !strings.HasSuffix(u.Path, tracesPath) {
		u.Path = path.Join("/", u.Path, tracesPath)
	}
	return u.String(), nil
}

// Start starts a span named name, a child of ctx's span (or of the
// remote span Extract put in ctx). When tracing is off it returns ctx and
// ctx's span (a no-op one) without allocating.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	in := provider.Load()
	if in == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return in.tracer.Start(ctx, name, opts...)
}

// Fail marks span as failed with err (nil: nothing). The error's text
// (which may quote a provider's reply) is made valid UTF-8 and cut to
// MaxAttrBytes: an invalid string makes the OTLP exporter drop the whole
// batch of spans.
func Fail(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		msg := Clean(err.Error())
		span.AddEvent("exception", trace.WithAttributes(
			attribute.String("exception.type", fmt.Sprintf("%T", err)), attribute.String("exception.message", msg)))
		span.SetStatus(codes.Error, msg)
	}
}

// MaxAttrBytes bounds a string attribute Clean keeps.
const MaxAttrBytes = 256

// Clean makes s fit for a span attribute: invalid UTF-8 dropped, then cut
// to at most MaxAttrBytes on a rune boundary. Any string that comes from
// outside (a tenant, a model, a provider's error) goes through it: the
// OTLP exporter's protobuf encoding refuses invalid UTF-8 and drops the
// whole batch of spans with it, other tenants' spans included.
func Clean(s string) string {
	s = strings.ToValidUTF8(s, "")
	if len(s) <= MaxAttrBytes {
		return s
	}
	n := MaxAttrBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Hash is a short digest of s (the first 16 hex digits of its SHA-256),
// to tell tenant data apart on spans without carrying it.
func Hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// FlushTimeout bounds the flush at shutdown the CLI waits for.
const FlushTimeout = 5 * time.Second
