package tracing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"net/http/httptest"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/makerfleet/makerfleet/internal/tracing"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"short", "abc", "abc"},
		{"exact", strings.Repeat("a", tracing.MaxAttrBytes), strings.Repeat("a", tracing.MaxAttrBytes)},
		// "é" is 2 bytes: 128 of them end on byte 256, 129 would split
		// the 129th at the cut.
		{"two-byte rune at the cut", "a" + strings.Repeat("é", 200), "a" + strings.Repeat("é", 127)},
		{"four-byte rune at the cut", strings.Repeat("a", 254) + "😀" + "b", strings.Repeat("a", 254)},
		{"invalid bytes dropped", "ok\xffno\xc3", "okno"},
		{"byte-cut input", strings.Repeat("é", 200)[:255], strings.Repeat("é", 127)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tracing.Clean(tc.in)
			if got != tc.want {
				t.Errorf("Clean = %q (%d bytes), want %q (%d bytes)", got, len(got), tc.want, len(tc.want))
			}
			if !utf8.ValidString(got) || len(got) > tracing.MaxAttrBytes {
				t.Errorf("Clean = %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
		})
	}
	if h := tracing.Hash("answer"); len(h) != 16 || h == tracing.Hash("answer2") || h != tracing.Hash("answer") {
		t.Errorf("Hash %q: want 16 hex digits, stable, distinct", h)
	}
}

// A failed span whose error quotes invalid UTF-8 (a provider's body cut
// mid-rune) still reaches the collector, with the span before it: the
// OTLP exporter drops a whole batch holding one invalid string.
func TestFailInvalidUTF8Exported(t *testing.T) {
	col := &collector{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(col)
	defer srv.Close()
	shutdown, err := tracing.Setup(context.Background(), tracing.Config{Endpoint: srv.URL, ServiceName: "maker-voter", InstanceID: "v"})
	if err != nil {
		t.Fatal(err)
	}
	_, clean := tracing.Start(context.Background(), "maker.step")
	clean.End()
	_, bad := tracing.Start(context.Background(), "maker.model_call")
	body := strings.Repeat("é", 200)[:255] // cut mid-rune, as a provider's quoted body may be
	bad.SetAttributes(attribute.String("gen_ai.response.model", tracing.Clean(body)))
	tracing.Fail(bad, errors.New("provider said: "+body+"\xff"))
	bad.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	var names []string
	for _, req := range col.reqs {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
					if s.Name == "maker.model_call" && (s.GetStatus().GetMessage() == "" || !utf8.ValidString(s.GetStatus().GetMessage())) {
						t.Errorf("status message %q", s.GetStatus().GetMessage())
					}
				}
			}
		}
	}
	if len(names) != 2 {
		t.Errorf("collector got spans %v, want maker.step and maker.model_call", names)
	}
}

// Trace headers are left out of a message they would bring within
// PayloadHeadroom of the max payload.
func TestInjectWithin(t *testing.T) {
	install(t)
	ctx, span := tracing.Start(context.Background(), "maker.sample_request")
	defer span.End()
	const maxPayload = 1 << 20
	for _, tc := range []struct {
		name    string
		dataLen int
		want    bool
	}{
		{"small", 1000, true},
		{"under the headroom", maxPayload - tracing.PayloadHeadroom - 200, true},
		{"near the limit", maxPayload - tracing.PayloadHeadroom - 50, false},
		{"at the limit", maxPayload - 60, false},
		{"over", maxPayload + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nats.Header{}
			h.Set("Nats-Msg-Id", "acme.j1.3.0.1.0")
			got := tracing.InjectWithin(ctx, h, tc.dataLen, maxPayload)
			if got != tc.want || (h.Get(tracing.HeaderTraceparent) != "") != tc.want {
				t.Errorf("InjectWithin = %v, traceparent %q; want injected %v", got, h.Get(tracing.HeaderTraceparent), tc.want)
			}
			if h.Get("Nats-Msg-Id") == "" {
				t.Error("InjectWithin lost the message id")
			}
		})
	}
}
