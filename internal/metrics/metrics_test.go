package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/metrics"
)

// scrape GETs url and parses the Prometheus text it serves.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value is the value of the sample of fam whose labels include want
// (a counter's, a gauge's, or a histogram's count).
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	fam, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range fam.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHandlerOutput records through every handle and reads the figures
// back over HTTP, as Prometheus would.
func TestHandlerOutput(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := metrics.NewRegistry("coordinator", "v1.2.3")
	c := metrics.NewCoordinator(reg)
	running := 3
	c.JobsRunning(func() int { return running })
	c.JobsRunning(func() int { return 99 }) // a second call is ignored, not a panic
	c.JobsWaiting([]string{"provider_unavailable", "unanswered"}, func(r string) int { return map[string]int{"provider_unavailable": 2}[r] })
	jt := c.Tenant("acme")
	jt.SamplesRequested(5)
	jt.Counted(4, map[string]int64{"parse": 1})
	jt.Decision("own_model", 2, 5, 3, true)
	jt.Decision("panel", 0, 12, 0, false)
	jt.Escalation("stronger_model")
	jt.Tokens("sim-1", 100, 20, 0.25)
	jt.Cost("judge", 0.5)
	c.LeaseTakeover()
	c.JobFinished("acme", "solved")
	v := metrics.NewVoter(reg)
	v.Answered("sim-1", "")
	v.Answered("sim-1", "length")
	v.CallStarted()
	v.CallDone(ctx, "sim-1", 30*time.Millisecond, nil)
	v.CallStarted()
	v.CallDone(ctx, "sim-1", time.Millisecond, &llm.RetryLaterError{Cause: errors.New("x")})
	v.ModelError("sim-1", context.DeadlineExceeded)
	j := metrics.NewJudge(reg)
	j.Finished("break_glass", "refused", "missing_trigger", "acme", 0)
	j.Finished("arbitration", "answered", "", "acme", 0.75)
	h := metrics.NewHTTP(reg)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })
	api := httptest.NewServer(h.Middleware(mux))
	defer api.Close()
	for range 2 {
		if code, _ := get(t, api.URL+"/v1/jobs/job-"+fmt.Sprint(time.Now().UnixNano())); code != http.StatusNotFound {
			t.Fatalf("code %d", code)
		}
	}
	get(t, api.URL+"/nothing")

	srv, err := metrics.Start(ctx, "127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") || !strings.HasSuffix(srv.URL(), "/metrics") {
		t.Errorf("URL %q", srv.URL())
	}
	fams := scrape(t, srv.URL())
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"maker_build_info", map[string]string{"role": "coordinator", "version": "v1.2.3"}, 1},
		{"maker_jobs_running", nil, 3},
		{"maker_jobs_waiting", map[string]string{"reason": "provider_unavailable"}, 2},
		{"maker_jobs_waiting", map[string]string{"reason": "unanswered"}, 0},
		{"maker_samples_requested_total", map[string]string{"tenant": "acme"}, 5},
		{"maker_votes_total", map[string]string{"tenant": "acme"}, 4},
		{"maker_samples_red_flagged_total", map[string]string{"tenant": "acme", "reason": "parse"}, 1},
		{"maker_decisions_total", map[string]string{"tenant": "acme", "rung": "own_model"}, 1},
		{"maker_decisions_total", map[string]string{"tenant": "acme", "rung": "panel"}, 1},
		{"maker_step_rounds", map[string]string{"tenant": "acme"}, 2},
		{"maker_step_samples", map[string]string{"tenant": "acme"}, 2},
		{"maker_step_margin", map[string]string{"tenant": "acme"}, 1}, // the panel's choice has none
		{"maker_escalations_total", map[string]string{"tenant": "acme", "rung": "stronger_model"}, 1},
		{"maker_lease_takeovers_total", nil, 1},
		{"maker_jobs_finished_total", map[string]string{"tenant": "acme", "state": "solved"}, 1},
		{"maker_tokens_total", map[string]string{"tenant": "acme", "model": "sim-1", "kind": "prompt"}, 100},
		{"maker_tokens_total", map[string]string{"tenant": "acme", "model": "sim-1", "kind": "completion"}, 20},
		{"maker_cost_usd_total", map[string]string{"tenant": "acme", "model": "sim-1"}, 0.25},
		{"maker_cost_usd_total", map[string]string{"tenant": "acme", "model": "judge"}, 0.5},
		{"maker_samples_answered_total", map[string]string{"model": "sim-1"}, 2},
		{"maker_voter_red_flagged_total", map[string]string{"model": "sim-1", "reason": "length"}, 1},
		{"maker_model_latency_seconds", map[string]string{"model": "sim-1"}, 1},
		{"maker_model_errors_total", map[string]string{"model": "sim-1", "code": "other"}, 1},
		{"maker_model_errors_total", map[string]string{"model": "sim-1", "code": "timeout"}, 1},
		{"maker_voter_in_flight", nil, 0},
		{"maker_judge_calls_total", map[string]string{"kind": "break_glass", "outcome": "refused"}, 1},
		{"maker_judge_refusals_total", map[string]string{"reason": "missing_trigger"}, 1},
		{"maker_judge_cost_usd_total", map[string]string{"tenant": "acme"}, 0.75},
		{"maker_http_requests_total", map[string]string{"route": "GET /v1/jobs/{id}", "code": "404"}, 2},
		{"maker_http_requests_total", map[string]string{"route": "unmatched", "code": "404"}, 1},
		{"maker_http_request_duration_seconds", map[string]string{"route": "GET /v1/jobs/{id}"}, 2},
	} {
		if got, ok := value(fams, tc.name, tc.labels); !ok || got != tc.want {
			t.Errorf("%s%v = %v (found %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("no %s: the Go and process collectors are missing", name)
		}
	}
	for name := range fams {
		if !strings.HasPrefix(name, "maker_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("metric %s outside the contract's prefixes", name)
		}
	}
}

// TestReadiness: /healthz answers while the process runs; /readyz is 503
// with the failing check's reason until it passes.
func TestReadiness(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var up atomic.Bool
	srv, err := metrics.Start(ctx, "127.0.0.1:0", metrics.NewRegistry("voter", "dev"), nil,
		metrics.Check{Name: "nats", Fn: func(context.Context) error {
			if !up.Load() {
				return errors.New("not connected (RECONNECTING)")
			}
			return nil
		}},
		metrics.Check{Name: "topology", Fn: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, tc := range []struct {
		up       bool
		path     string
		code     int
		contains string
	}{
		{false, "/healthz", 200, "ok"},
		{false, "/readyz", 503, "nats: not connected (RECONNECTING)"},
		{true, "/readyz", 200, "ok"},
		{true, "/healthz", 200, "ok"},
	} {
		up.Store(tc.up)
		code, body := get(t, srv.BaseURL()+tc.path)
		if code != tc.code || !strings.Contains(body, tc.contains) {
			t.Errorf("up=%v GET %s: %d %q, want %d with %q", tc.up, tc.path, code, body, tc.code, tc.contains)
		}
		if tc.code == 503 && strings.Contains(body, "topology") {
			t.Errorf("a passing check named in the 503: %q", body)
		}
	}
}

// TestServerStopsWithContext: ending Start's ctx closes the server.
func TestServerStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := metrics.Start(ctx, "127.0.0.1:0", metrics.NewRegistry("judge", "dev"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := srv.Close(); err != nil { // waits for the shutdown ctx started
		t.Fatal(err)
	}
	if _, err := http.Get(srv.URL()); err == nil {
		t.Fatal("still serving after its context ended")
	}
	if _, err := metrics.Start(context.Background(), "256.0.0.1:bad", metrics.NewRegistry("judge", "dev"), nil); err == nil {
		t.Fatal("a bad address was accepted")
	}
}

// TestNilSafe: a role without metrics holds nil handles; every method is
// a no-op and the middleware is the handler itself.
func TestNilSafe(t *testing.T) {
	var (
		c *metrics.Coordinator
		v *metrics.Voter
		j *metrics.Judge
		h *metrics.HTTP
	)
	c.JobsRunning(func() int { return 1 })
	c.LeaseTakeover()
	c.JobFinished("t", "solved")
	jt := c.Tenant("t")
	if jt != nil {
		t.Fatal("a nil Coordinator's Tenant is not nil")
	}
	jt.SamplesRequested(1)
	jt.Counted(1, map[string]int64{"x": 1})
	jt.Decision("own_model", 1, 1, 1, true)
	jt.Escalation("panel")
	jt.Tokens("m", 1, 1, 1)
	jt.Cost("m", 1)
	v.Answered("m", "x")
	v.CallStarted()
	v.CallDone(context.Background(), "m", time.Second, errors.New("x"))
	v.ModelError("m", errors.New("x"))
	j.Finished("k", "o", "r", "t", 1)
	next := http.NotFoundHandler()
	if got := h.Middleware(next); fmt.Sprintf("%p", got) != fmt.Sprintf("%p", next) {
		t.Error("a nil HTTP's middleware wraps the handler")
	}
}

// TestErrorCode sorts model errors into the contract's codes.
func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: x", llm.ErrAttemptTimeout), "timeout"},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), "timeout"},
		{errors.New("connection refused"), "other"},
		{fmt.Errorf("%w: bad", llm.ErrPermanent), "other"},
	} {
		if got := metrics.ErrorCode(tc.err); got != tc.want {
			t.Errorf("ErrorCode(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
