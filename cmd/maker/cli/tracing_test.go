package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestTracingFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"coordinator", "--otlp-endpoint", "collector:4318"}, "--otlp-endpoint"},
		{[]string{"voter", "--otlp-endpoint", "ftp://collector:4318"}, "--otlp-endpoint"},
		{[]string{"judge", "--otlp-endpoint", "http://127.0.0.1:4318", "--trace-sample-ratio", "0"}, "--trace-sample-ratio"},
		{[]string{"serve", "--trace-sample-ratio", "1.5"}, "--trace-sample-ratio"},
		{[]string{"run", "--trace-sample-ratio", "-1"}, "--trace-sample-ratio"},
	} {
		res := runMain(t, tc.args...)
		if res.code != ExitUsage || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("maker %s: exit %d, stderr %q; want %d naming %s", strings.Join(tc.args, " "), res.code, res.stderr, ExitUsage, tc.want)
		}
	}
}

// maker run --otlp-endpoint posts the job's spans to the collector's
// /v1/traces, as service maker-run.
func TestRunExportsTraces(t *testing.T) {
	var (
		mu      sync.Mutex
		names   = map[string]int{}
		service = map[string]bool{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, err := io.ReadAll(r.Body)
		req := &coltrace.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(data, req)
		}
		if r.URL.Path != "/v1/traces" || err != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service[kv.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names[s.Name]++
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	res := runMain(t, "run", "-q", "--json", "--task", "hanoi", "--disks", "2", "--otlp-endpoint", srv.URL)
	if res.code != ExitOK {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if !strings.Contains(res.stderr, "tracing on") {
		t.Errorf("stderr does not say tracing is on: %s", res.stderr)
	}
	// The flush at exit is over when the command returns.
	mu.Lock()
	defer mu.Unlock()
	if names["maker.step"] < 3 || names["maker.sample"] < 3 || names["maker.model_call"] < 3 || names["maker.sample_request"] < 3 {
		t.Errorf("collector got spans %v; want each kind for 3 steps", names)
	}
	if !service["maker-run"] {
		t.Errorf("service names %v, want maker-run", service)
	}
}
