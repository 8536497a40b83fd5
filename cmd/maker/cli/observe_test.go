package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
)

var metricsLine = regexp.MustCompile(`(?m)^metrics listening on (http://127\.0\.0\.1:\d+)/metrics$`)

// startService runs Main with args until the test ends and returns the
// base URL its metrics listen on, as printed on stderr.
func startService(t *testing.T, args ...string) (base string, stderr *syncBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	stderr = &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- Main(ctx, args, &out, stderr) }()
	code := -1
	stop = func() int {
		if code == -1 {
			cancel()
			code = <-done
		}
		return code
	}
	t.Cleanup(func() { stop() })
	testkit.Eventually(t, 30*time.Second, func() bool {
		select {
		case c := <-done:
			code = c
			t.Fatalf("%v exited %d: %s", args, c, stderr.String())
		default:
		}
		return metricsLine.MatchString(stderr.String())
	}, "no %q line on stderr", "metrics listening on")
	return metricsLine.FindStringSubmatch(stderr.String())[1], stderr, stop
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCoordinatorMetricsAddr: maker coordinator --metrics-addr
// 127.0.0.1:0 prints where its metrics are, serves /healthz, /readyz
// (NATS, Redis, the topology it creates) and the contract's metrics,
// logs JSON lines with --log-format json and names its NATS connection
// maker-coordinator-<id>.
func TestCoordinatorMetricsAddr(t *testing.T) {
	t.Parallel()
	ns := testkit.StartNATS(t)
	rd := testkit.StartRedis(t)
	base, stderr, stop := startService(t, "coordinator", "--nats", ns.URL, "--redis", rd.URL(), "--id", "c7",
		"--metrics-addr", "127.0.0.1:0", "--log-format", "json")
	if code, body := httpGet(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		code, _ := httpGet(t, base+"/readyz")
		return code == 200
	}, "/readyz never 200")
	// The consumers are made after the streams: their lag shows soon after.
	var code int
	var body string
	// Each consumer's lag shows once the consumer exists: wait for both.
	lags := []string{
		`maker_queue_pending_messages{consumer="voters",stream="MAKER_SAMPLES"} 0`,
		`maker_queue_pending_messages{consumer="coordinators",stream="MAKER_JOBS"} 0`,
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		code, body = httpGet(t, base+"/metrics")
		return strings.Contains(body, lags[0]) && strings.Contains(body, lags[1])
	}, "the queues' lag never in /metrics")
	for _, want := range []string{
		`maker_build_info{role="coordinator",version="` + Version + `"} 1`,
		"maker_jobs_running 0",
		"go_goroutines ", "process_cpu_seconds_total ",
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
	connz, err := ns.Server.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range connz.Conns {
		names = append(names, c.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "maker-coordinator-c7") {
		t.Errorf("connection names %v, want maker-coordinator-c7", names)
	}
	if code := stop(); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var started bool
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if metricsLine.MatchString(line) {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON log line: %q", line)
			continue
		}
		if rec["msg"] == "coordinator started" && rec["level"] == "INFO" {
			started = true
		}
	}
	if !started {
		t.Errorf("no JSON \"coordinator started\" line in %s", stderr.String())
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("metrics still served after the coordinator stopped")
	}
}

// TestVoterReadiness: a voter started before the fleet's topology is
// alive (/healthz 200) but not ready (/readyz 503 naming the missing
// stream) until a coordinator creates it.
func TestVoterReadiness(t *testing.T) {
	t.Parallel()
	ns := testkit.StartNATS(t)
	sim := fleettest.StartSim(t, simllm.Config{})
	base, stderr, stop := startService(t, "voter", "--nats", ns.URL, "--llm-base-url", sim.URL(), "--model", simllm.DefaultModel,
		"--id", "voter-v3", "--metrics-addr", "127.0.0.1:0")
	if code, _ := httpGet(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	code, body := httpGet(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "topology: stream MAKER_JOBS not found") {
		t.Errorf("/readyz before the topology: %d %q", code, body)
	}
	_, js := testkit.Connect(t, ns.URL)
	if _, err := topology.Ensure(t.Context(), js, topology.Config{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		code, _ := httpGet(t, base+"/readyz")
		return code == 200
	}, "/readyz never 200 once the topology exists")
	if code, body := httpGet(t, base+"/metrics"); !strings.Contains(body, "maker_voter_in_flight 0") || code != 200 {
		t.Errorf("/metrics %d lacks maker_voter_in_flight", code)
	}
	connz, err := ns.Server.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range connz.Conns {
		found = found || c.Name == "maker-voter-v3"
	}
	if !found {
		t.Error("no NATS connection named maker-voter-v3")
	}
	// Stopped once running (a voter stopped while it waits for the
	// topology exits interrupted).
	testkit.Eventually(t, 30*time.Second, func() bool { return strings.Contains(stderr.String(), "voter started") },
		"the voter never started")
	if code := stop(); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// TestLogFormatUsage: a log format other than text or json is a usage
// error, from the flag or the environment.
func TestLogFormatUsage(t *testing.T) {
	if o := runMain(t, "--log-format", "xml", "plan", "--help"); o.code != ExitUsage || !strings.Contains(o.stderr, "want text or json") {
		t.Errorf("--log-format xml: exit %d, stderr %q", o.code, o.stderr)
	}
	t.Setenv("MAKER_LOG_FORMAT", "xml")
	if o := runMain(t, "plan", "--help"); o.code != ExitUsage || !strings.Contains(o.stderr, "$MAKER_LOG_FORMAT") {
		t.Errorf("MAKER_LOG_FORMAT=xml: exit %d, stderr %q", o.code, o.stderr)
	}
	t.Setenv("MAKER_LOG_FORMAT", "JSON")
	if o := runMain(t, "plan", "--help"); o.code != ExitOK {
		t.Errorf("MAKER_LOG_FORMAT=JSON: exit %d, stderr %q", o.code, o.stderr)
	}
}

// TestServeMetrics: maker serve --metrics-addr counts the API's requests
// by route pattern (never the raw path) and code, and is ready once NATS,
// Redis and the topology are.
func TestServeMetrics(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	key, _, err := apikey.New(env.Topo).Create(t.Context(), apikey.CreateOptions{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	mbase, stderr, stop := startService(t, "serve", "--nats", env.NATS.URL, "--redis", env.Redis().URL(), "--addr", "127.0.0.1:0",
		"--metrics-addr", "127.0.0.1:0")
	var api string
	testkit.Eventually(t, 30*time.Second, func() bool {
		m := listeningRE.FindStringSubmatch(stderr.String())
		if m != nil {
			api = m[1]
		}
		return m != nil
	}, "serve never listened")
	for _, id := range []string{"job-a", "job-b"} {
		req, _ := http.NewRequest("GET", api+"/v1/jobs/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("GET /v1/jobs/%s: %d", id, resp.StatusCode)
		}
	}
	if code, _ := httpGet(t, api+"/v1/jobs"); code != http.StatusUnauthorized {
		t.Fatalf("no key: %d", code)
	}
	if code, body := httpGet(t, mbase+"/readyz"); code != 200 {
		t.Errorf("/readyz %d %q", code, body)
	}
	_, body := httpGet(t, mbase+"/metrics")
	for _, want := range []string{
		`maker_http_requests_total{code="404",route="GET /v1/jobs/{id}"} 2`,
		`maker_http_requests_total{code="401",route="GET /v1/jobs"} 1`,
		`maker_http_request_duration_seconds_count{route="GET /v1/jobs/{id}"} 2`,
		`maker_build_info{role="serve",`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "job-a") {
		t.Error("a raw path is a label")
	}
	if code := stop(); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// TestMetricsAddrRefused: a --metrics-addr (or $MAKER_METRICS_ADDR) that is
// not HOST:PORT is a usage error on every command that takes it, before
// anything connects (the NATS URL here answers nothing).
func TestMetricsAddrRefused(t *testing.T) {
	for _, cmd := range [][]string{
		{"coordinator", "--nats", "nats://127.0.0.1:1"},
		{"voter", "--nats", "nats://127.0.0.1:1", "--llm-base-url", "http://127.0.0.1:1/v1", "--model", "m"},
		{"judge", "--nats", "nats://127.0.0.1:1", "--llm-base-url", "http://127.0.0.1:1/v1"},
		{"serve", "--nats", "nats://127.0.0.1:1", "--redis", "redis://127.0.0.1:1/0"},
		{"up"},
	} {
		for _, addr := range []string{"nonsense", "127.0.0.1:99999", ":abc", "127.0.0.1:-1"} {
			o := runMain(t, append(cmd, "--metrics-addr", addr)...)
			if o.code != ExitUsage || !strings.Contains(o.stderr, "--metrics-addr") {
				t.Errorf("%s --metrics-addr %s: exit %d: %s", cmd[0], addr, o.code, o.stderr)
			}
		}
	}
	t.Setenv("MAKER_METRICS_ADDR", "bogus")
	if o := runMain(t, "coordinator", "--nats", "nats://127.0.0.1:1"); o.code != ExitUsage {
		t.Errorf("$MAKER_METRICS_ADDR=bogus: exit %d: %s", o.code, o.stderr)
	}
}
