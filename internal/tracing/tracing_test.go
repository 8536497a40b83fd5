package tracing_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/makerfleet/makerfleet/internal/tracing"
)

// install sets up tracing into an in-memory exporter until the test ends.
func install(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	shutdown, err := tracing.Setup(context.Background(), tracing.Config{Exporter: exp, InstanceID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return exp
}

func TestOffByDefault(t *testing.T) {
	if tracing.Enabled() {
		t.Fatal("tracing is on before Setup")
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	h := nats.Header{}
	tracing.Inject(ctx, h)
	if len(h) != 0 {
		t.Errorf("Inject with tracing off wrote %v", h)
	}
	got, span := tracing.Start(context.Background(), "maker.step")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Errorf("Start with tracing off gave a live span %v", span.SpanContext())
	}
	span.End()
	h.Set(tracing.HeaderTraceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if sc := trace.SpanContextFromContext(tracing.Extract(got, h)); sc.IsValid() {
		t.Errorf("Extract with tracing off read %v", sc)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		c, s := tracing.Start(ctx, "maker.sample_request")
		tracing.Inject(c, h)
		s.End()
	}); allocs != 0 {
		t.Errorf("tracing off: %v allocations per span, want 0", allocs)
	}
}

func TestPropagation(t *testing.T) {
	exp := install(t)
	ctx, parent := tracing.Start(context.Background(), "maker.sample_request")
	h := nats.Header{}
	tracing.Inject(ctx, h)
	parent.End()
	tp := h.Get(tracing.HeaderTraceparent)
	want := "00-" + parent.SpanContext().TraceID().String() + "-" + parent.SpanContext().SpanID().String() + "-01"
	if tp != want {
		t.Fatalf("traceparent %q, want %q", tp, want)
	}
	remote := tracing.Remote(h)
	if !remote.IsRemote() || remote.TraceID() != parent.SpanContext().TraceID() || remote.SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("remote span context %v, want the parent's %v", remote, parent.SpanContext())
	}
	_, child := tracing.Start(tracing.Extract(context.Background(), h), "maker.sample")
	child.End()
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	if c := spans[1]; c.Parent.SpanID() != parent.SpanContext().SpanID() || c.SpanContext.TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("child's parent %v, want %v", c.Parent, parent.SpanContext())
	}
}

// A malformed or forged traceparent is ignored: the span starts a new
// trace, and nothing fails.
func TestGarbageTraceparent(t *testing.T) {
	exp := install(t)
	for _, tc := range []struct{ name, traceparent, tracestate string }{
		{"empty", "", ""},
		{"garbage", "garbage", ""},
		{"zero trace id", "00-00000000000000000000000000000000-b7ad6b7169203331-01", ""},
		{"zero span id", "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", ""},
		{"version ff", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ""},
		{"short trace id", "00-0af7651916cd43dd-b7ad6b7169203331-01", ""},
		{"not hex", "00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01", ""},
		{"huge", "00-" + strings.Repeat("a", 1<<16), strings.Repeat("k=v,", 1<<12)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp.Reset()
			h := nats.Header{}
			h.Set(tracing.HeaderTraceparent, tc.traceparent)
			if tc.tracestate != "" {
				h.Set(tracing.HeaderTracestate, tc.tracestate)
			}
			if sc := tracing.Remote(h); sc.IsValid() {
				t.Fatalf("remote span context %v from %q", sc, tc.traceparent)
			}
			_, span := tracing.Start(tracing.Extract(context.Background(), h), "maker.sample")
			span.End()
			spans := exp.GetSpans()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			if s := spans[0]; s.Parent.IsValid() || !s.SpanContext.IsValid() {
				t.Errorf("span parent %v (want none), context %v (want a new trace)", s.Parent, s.SpanContext)
			}
		})
	}
}

func TestTracesURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"},
		{"http://collector:4318/", "http://collector:4318/v1/traces"},
		{"https://otel.example.com/otlp", "https://otel.example.com/otlp/v1/traces"},
		{"http://collector:4318/v1/traces", "http://collector:4318/v1/traces"},
		{"localhost:4318", ""},
		{"ftp://collector:4318", ""},
		{"http://", ""},
	} {
		got, err := tracing.TracesURL(tc.in)
		if (err != nil) != (tc.want == "") || got != tc.want {
			t.Errorf("TracesURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestSetupRefuses(t *testing.T) {
	for _, cfg := range []tracing.Config{
		{},
		{Endpoint: "collector:4318"},
		{Endpoint: "http://127.0.0.1:4318", SampleRatio: 1.5},
		{Endpoint: "http://127.0.0.1:4318", SampleRatio: -0.1},
	} {
		if shutdown, err := tracing.Setup(context.Background(), cfg); err == nil {
			_ = shutdown(context.Background())
			t.Errorf("Setup(%+v) succeeded", cfg)
		}
	}
	if tracing.Enabled() {
		t.Error("a refused Setup left tracing on")
	}
}

// collector is a fake OTLP/HTTP receiver: it keeps the spans posted to
// /v1/traces.
type collector struct {
	mu    sync.Mutex
	reqs  []*coltrace.ExportTraceServiceRequest
	other []string
	got   chan struct{}
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		c.mu.Lock()
		c.other = append(c.other, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		c.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	req := &coltrace.ExportTraceServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(data, req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	select {
	case c.got <- struct{}{}:
	default:
	}
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = io.Copy(w, bytes.NewReader(out))
}

// The OTLP exporter really posts: spans reach a collector at the
// endpoint's /v1/traces, with the resource naming the service.
func TestOTLPExport(t *testing.T) {
	col := &collector{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(col)
	defer srv.Close()
	shutdown, err := tracing.Setup(context.Background(), tracing.Config{
		Endpoint: srv.URL, ServiceName: "maker-coordinator", InstanceID: "coordinator-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tracing.Start(context.Background(), "maker.step")
	span.End()
	// Shutdown flushes the batch: the post is done when it returns.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if tracing.Enabled() {
		t.Error("tracing still on after shutdown")
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.other) > 0 {
		t.Errorf("unexpected requests: %v", col.other)
	}
	var names []string
	var service, instance string
	for _, req := range col.reqs {
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				switch kv.Key {
				case "service.name":
					service = kv.GetValue().GetStringValue()
				case "service.instance.id":
					instance = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
					if id := span.SpanContext().TraceID(); !bytes.Equal(s.TraceId, id[:]) {
						t.Errorf("posted trace id %x, want %s", s.TraceId, span.SpanContext().TraceID())
					}
				}
			}
		}
	}
	if len(names) != 1 || names[0] != "maker.step" {
		t.Errorf("collector got spans %v, want [maker.step]", names)
	}
	if service != "maker-coordinator" || instance != "coordinator-1" {
		t.Errorf("resource service.name %q, service.instance.id %q", service, instance)
	}
}

// BenchmarkPublishOff is what a sample request's publish pays for tracing
// when it is off: a request span that is not started and no header.
func BenchmarkPublishOff(b *testing.B) {
	h := nats.Header{}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if tracing.Enabled() {
			b.Fatal("tracing on")
		}
		c, span := tracing.Start(ctx, "maker.sample_request")
		tracing.Inject(c, h)
		span.End()
	}
}

// BenchmarkPublishOn is the same with tracing on (spans to an in-memory
// exporter): a span started, injected and ended.
func BenchmarkPublishOn(b *testing.B) {
	exp := tracetest.NewInMemoryExporter()
	shutdown, err := tracing.Setup(context.Background(), tracing.Config{Exporter: exp, InstanceID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	ctx, step := tracing.Start(context.Background(), "maker.step")
	defer step.End()
	b.ReportAllocs()
	for b.Loop() {
		h := nats.Header{}
		c, span := tracing.Start(ctx, "maker.sample_request")
		tracing.Inject(c, h)
		span.End()
		if len(h) == 0 {
			b.Fatal("no header")
		}
		exp.Reset()
	}
}
