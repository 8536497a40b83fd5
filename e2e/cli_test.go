package e2e

import (
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/cmd/maker/cli"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestBadInputIsRefused: every invalid invocation exits with the usage
// code, says what is wrong on stderr, prints nothing on stdout and, for
// submit against a live NATS, enqueues nothing.
func TestBadInputIsRefused(t *testing.T) {
	svc := startServices(t, false)
	nats := []string{"--nats", svc.natsURL}
	cases := []struct {
		name string
		args []string
		want string // on stderr
	}{
		{"submit k 0", []string{"submit", "--k", "0"}, "k must be >= 1"},
		{"submit k -1", []string{"submit", "--k", "-1"}, "k must be >= 1"},
		{"submit disks 0", []string{"submit", "--k", "3", "--disks", "0"}, "disks must be between 1 and 30, got 0"},
		{"submit disks 31", []string{"submit", "--k", "3", "--disks", "31"}, "disks must be between 1 and 30, got 31"},
		{"submit p 0.5", []string{"submit", "--p", "0.5"}, "p must be in (0.5, 1)"},
		{"submit p 1", []string{"submit", "--p", "1"}, "p must be in (0.5, 1)"},
		{"submit p 1.5", []string{"submit", "--p", "1.5"}, "p must be in (0.5, 1)"},
		{"submit p NaN", []string{"submit", "--p", "NaN"}, "p must be in (0.5, 1)"},
		{"submit p 0", []string{"submit", "--k", "3", "--p", "0"}, "p must be in (0.5, 1)"},
		{"submit NaN price", []string{"submit", "--k", "3", "--input-price", "NaN"}, "prices must be >= 0"},
		{"submit negative input price", []string{"submit", "--k", "3", "--input-price", "-1"}, "prices must be >= 0"},
		{"submit negative output price", []string{"submit", "--k", "3", "--output-price", "-0.5"}, "prices must be >= 0"},
		{"submit max-samples 0", []string{"submit", "--k", "3", "--max-samples", "0"}, "--max-samples must be >= 1"},
		{"submit max-samples below k", []string{"submit", "--k", "3", "--max-samples", "2"}, "max_samples_per_step must be between k"},
		{"submit unknown task", []string{"submit", "--k", "3", "--task", "nope", "--params", "{}"}, `unknown task "nope"`},
		{"submit unknown task without params", []string{"submit", "--k", "3", "--task", "nope"}, `unknown task "nope"`},
		{"submit params not JSON", []string{"submit", "--k", "3", "--params", "{disks: 5"}, "--params is not valid JSON"},
		{"submit params not an object", []string{"submit", "--k", "3", "--params", "[5]"}, "hanoi params must be"},
		{"submit params unknown field", []string{"submit", "--k", "3", "--params", `{"disk":5}`}, "hanoi params must be"},
		{"submit target 1", []string{"submit", "--k", "3", "--target", "1"}, "--target 1 must be in (0, 1)"},
		{"submit sample-timeout 0", []string{"submit", "--k", "3", "--sample-timeout", "0s"}, "--sample-timeout must be > 0"},
		{"submit bad job id", []string{"submit", "--k", "3", "--job-id", "no spaces"}, "job id"},
		{"submit bad tenant", []string{"submit", "--k", "3", "--tenant", "Upper_Case"}, "tenant"},
		{"submit unknown flag", []string{"submit", "--k", "3", "--bogus"}, "unknown flag: --bogus"},
		{"submit bad flag value", []string{"submit", "--k", "three"}, `invalid argument "three"`},
		{"submit positional arg", []string{"submit", "--k", "3", "extra"}, `unknown command "extra"`},
		{"submit stronger price without a ladder", []string{"submit", "--k", "3", "--stronger-input-price", "3"}, "need --stronger-model or --panel"},
		{"submit stronger samples without a ladder", []string{"submit", "--k", "3", "--stronger-samples", "5"}, "need --stronger-model or --panel"},
		{"submit stronger samples below k", []string{"submit", "--k", "3", "--stronger-model", "m", "--stronger-samples", "2"}, "escalation.stronger_samples must be between k (3)"},
		{"submit stronger negative price", []string{"submit", "--k", "3", "--stronger-model", "m", "--stronger-output-price", "-1"}, "escalation.stronger_pricing.output_usd_per_mtok must be between 0"},
		{"submit stronger price, panel only", []string{"submit", "--k", "3", "--panel", "--stronger-input-price", "2"}, "escalation.stronger_pricing prices no stronger_model"},
		{"submit min-confidence over 1", []string{"submit", "--k", "3", "--panel", "--min-confidence", "1.5"}, "escalation.min_confidence must be in [0, 1]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := runMaker(t, 30*time.Second, append(tc.args, nats...)...)
			checkRefused(t, res, tc.want)
			if n := svc.jobMessages(t); n > 0 {
				t.Errorf("a refused submit left %d messages in the job stream", n)
			}
		})
	}
	if n := svc.jobMessages(t); n != -1 {
		t.Errorf("refused submits created the job stream (%d messages): nothing should have been sent", n)
	}

	others := []struct {
		name string
		args []string
		want string
	}{
		{"plan p 0.5", []string{"plan", "--disks", "20", "--p", "0.5"}, "voting does not converge"},
		{"plan p 0.3", []string{"plan", "--steps", "1000", "--p", "0.3"}, "voting does not converge"},
		{"plan p 1", []string{"plan", "--disks", "20", "--p", "1"}, "must be below 1"},
		{"plan steps and disks", []string{"plan", "--steps", "1000", "--disks", "10", "--p", "0.99"}, "give --steps or --disks, not both"},
		{"plan neither steps nor disks", []string{"plan", "--p", "0.99"}, "give --steps S or --disks N"},
		{"plan no p", []string{"plan", "--disks", "20"}, "--p is required"},
		{"plan disks 31", []string{"plan", "--disks", "31", "--p", "0.99"}, "disks = 31 must be between 1 and 30"},
		{"plan steps 0", []string{"plan", "--steps", "0", "--p", "0.99"}, "steps = 0 must be at least 1"},
		{"plan output tokens 0", []string{"plan", "--disks", "10", "--p", "0.99", "--output-tokens", "0"}, "--output-tokens 0 must be >= 1"},
		{"plan k 0", []string{"plan", "--disks", "10", "--p", "0.99", "--k", "0"}, "k must be >= 1"},
		{"run disks 31", []string{"run", "--disks", "31"}, "disks must be between 1 and 30, got 31"},
		{"run k 0", []string{"run", "--disks", "5", "--k", "0"}, "k must be >= 1"},
		{"run sim accuracy 0", []string{"run", "--disks", "5", "--sim-accuracy", "0"}, "--sim-accuracy 0 must be in (0, 1]"},
		{"run concurrency 0", []string{"run", "--disks", "5", "--concurrency", "0"}, "--concurrency must be >= 1"},
		{"run model url without model", []string{"run", "--disks", "5", "--llm-base-url", "http://127.0.0.1:1/v1"}, "--model is required"},
		{"run sim accuracy 0.5 without k", []string{"run", "--disks", "3", "--sim-accuracy", "0.5"},
			"cannot choose k: the simulated model's accuracy at temperature 0.1 (--sim-accuracy) is 0.5"},
		{"run temperature-rest 3", []string{"run", "--disks", "3", "--temperature-rest", "3"}, "--temperature-rest 3 must be between 0 and 2"},
		{"run temperature-first -1", []string{"run", "--disks", "3", "--temperature-first", "-1"}, "--temperature-first -1 must be between 0 and 2"},
		{"run sim-malformed-rate 1", []string{"run", "--disks", "3", "--sim-malformed-rate", "1"}, "no vote could ever be counted"},
		{"run malformed and overlong rates 1", []string{"run", "--disks", "3", "--sim-malformed-rate", "0.5", "--sim-overlong-rate", "0.5"}, "no vote could ever be counted"},
		{"bench runs 0", []string{"bench", "--disks", "5", "--runs", "0"}, "--runs must be >= 1"},
		{"bench llm-base-url", []string{"bench", "--disks", "3", "--llm-base-url", "x"}, "bench always uses the zero-latency simulated model"},
		{"bench llm-base-url and model", []string{"bench", "--disks", "3", "--llm-base-url", "http://127.0.0.1:1/v1", "--model", "m"},
			"bench always uses the zero-latency simulated model"},
		{"bench temperature-rest 3", []string{"bench", "--disks", "3", "--temperature-rest", "3"}, "--temperature-rest 3 must be between 0 and 2"},
		{"voter without model url", []string{"voter", "--nats", svc.natsURL, "--model", "sim-1"}, "--llm-base-url is required"},
		{"voter without model", []string{"voter", "--nats", svc.natsURL, "--llm-base-url", "http://127.0.0.1:1/v1"}, "--model is required"},
		{"voter concurrency 0", []string{"voter", "--nats", svc.natsURL, "--llm-base-url", "http://127.0.0.1:1/v1", "--model", "m", "--concurrency", "0"}, "--concurrency must be >= 1"},
		{"coordinator max-jobs 0", []string{"coordinator", "--nats", svc.natsURL, "--max-jobs", "0"}, "--max-jobs must be >= 1"},
		{"simllm accuracy 0", []string{"simllm", "--addr", "127.0.0.1:0", "--accuracy", "0"}, "--accuracy 0 must be in (0, 1]"},
		{"simllm accuracy 1.5", []string{"simllm", "--addr", "127.0.0.1:0", "--accuracy", "1.5"}, "--accuracy 1.5 must be in (0, 1]"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown root flag", []string{"--bogus"}, "unknown flag: --bogus"},
	}
	for _, tc := range others {
		t.Run(tc.name, func(t *testing.T) {
			checkRefused(t, runMaker(t, 30*time.Second, tc.args...), tc.want)
		})
	}
	if n := svc.jobMessages(t); n != -1 {
		t.Errorf("refused commands created the job stream (%d messages)", n)
	}
}

func checkRefused(t *testing.T, res result, want string) {
	t.Helper()
	if res.code != cli.ExitUsage {
		t.Errorf("exit code %d, want %d (usage)", res.code, cli.ExitUsage)
	}
	if !strings.HasPrefix(res.stderr, "maker: ") || !strings.Contains(res.stderr, want) {
		t.Errorf("stderr %q, want a \"maker: \" message containing %q", res.stderr, want)
	}
	if res.stdout != "" {
		t.Errorf("stdout %q, want nothing", res.stdout)
	}
}

// TestRuntimeFailureExitCode: a command that fails while running (here: no
// NATS to talk to) exits 1, not the usage code.
func TestRuntimeFailureExitCode(t *testing.T) {
	port, err := testkit.FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	res := runMaker(t, 30*time.Second, "submit", "--nats", "nats://127.0.0.1:"+strconv.Itoa(port), "--k", "3", "--disks", "5")
	if res.code != cli.ExitError {
		t.Errorf("exit code %d, want %d", res.code, cli.ExitError)
	}
	if !strings.HasPrefix(res.stderr, "maker: ") || !strings.Contains(res.stderr, "connect") {
		t.Errorf("stderr %q, want a \"maker: \" message about connecting", res.stderr)
	}
}

// TestVersion: --version prints the build's version and exits 0.
func TestVersion(t *testing.T) {
	res := runMaker(t, 30*time.Second, "--version")
	if res.code != 0 || !strings.Contains(res.stdout, "maker version ") {
		t.Errorf("--version: exit %d, stdout %q", res.code, res.stdout)
	}
}

func num(t *testing.T, m map[string]any, key string) float64 {
	t.Helper()
	v, ok := m[key]
	if !ok {
		t.Errorf("missing field %q", key)
		return math.NaN()
	}
	n, ok := v.(json.Number)
	if !ok {
		t.Errorf("field %q is %T %v, want a number", key, v, v)
		return math.NaN()
	}
	f, err := n.Float64()
	if err != nil {
		t.Errorf("field %q: %v", key, err)
	}
	return f
}

func near(t *testing.T, m map[string]any, key string, want, tol float64) {
	t.Helper()
	if got := num(t, m, key); !(math.Abs(got-want) <= tol) {
		t.Errorf("%s = %v, want %v ± %v", key, got, want, tol)
	}
}

// TestPlan checks the planner against the paper's figures: 20 disks at
// p = 0.998 need k = 3, about 3.01 votes a step and succeed with
// p_full ≈ 0.9916; at p = 0.99 the same task needs k = 4.
func TestPlan(t *testing.T) {
	res := runMaker(t, 30*time.Second, "plan", "--disks", "20", "--p", "0.998", "--target", "0.95", "--json")
	if res.code != 0 {
		t.Fatalf("plan exited %d: %s", res.code, res.stderr)
	}
	m := parseJSONOnly(t, res.stdout)
	near(t, m, "steps", 1048575, 0)
	near(t, m, "k_min", 3, 0)
	near(t, m, "k", 3, 0)
	near(t, m, "expected_votes_per_step", 3.01, 0.005)
	near(t, m, "p_full", 0.9916, 0.0001)
	if m["meets_target"] != true {
		t.Errorf("meets_target %v, want true", m["meets_target"])
	}
	if s := num(t, m, "expected_samples_per_step"); !(s >= 3.01 && s < 3.02) {
		t.Errorf("expected_samples_per_step %v, want ≈ 3.012 (all samples valid)", s)
	}
	if c := num(t, m, "expected_cost"); !(c > 0) {
		t.Errorf("expected_cost %v, want > 0", c)
	}

	res = runMaker(t, 30*time.Second, "plan", "--steps", "1048575", "--p", "0.99", "--json")
	if res.code != 0 {
		t.Fatalf("plan exited %d: %s", res.code, res.stderr)
	}
	near(t, parseJSONOnly(t, res.stdout), "k_min", 4, 0)

	res = runMaker(t, 30*time.Second, "plan", "--disks", "20", "--p", "0.998")
	if res.code != 0 {
		t.Fatalf("plan (text) exited %d: %s", res.code, res.stderr)
	}
	for _, want := range []string{"steps 1048575", "k_min                      3", "p_full (whole task)        0.991596", "expected votes per step    3.0120", "expected cost              $"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("text plan lacks %q:\n%s", want, res.stdout)
		}
	}
}

// TestSimllmLogRequests: --log-requests writes each request body as one
// JSON line, with "temperature": null when the request left it out, so a
// client that drops temperature 0 is caught.
func TestSimllmLogRequests(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "requests.jsonl")
	s := startSim(t, "simllm", "--log-requests", logPath)
	bodies := []string{
		`{"model":"sim-1","messages":[{"role":"user","content":"first"}],"temperature":0}`,
		`{"model":"sim-1","messages":[{"role":"user","content":"second"}]}`,
	}
	for _, b := range bodies {
		resp, err := httpc.Post(s.url+"/chat/completions", "application/json", strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %s", b, resp.Status)
		}
	}
	s.signal(syscall.SIGTERM)
	if code := s.wait(15 * time.Second); code != 0 {
		t.Errorf("simllm exited %d after SIGTERM, want 0", code)
	}
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	got := lines(string(raw))
	if len(got) != 2 {
		t.Fatalf("log holds %d lines, want 2:\n%s", len(got), raw)
	}
	var reqs [2]map[string]json.RawMessage
	for i, l := range got {
		if err := json.Unmarshal([]byte(l), &reqs[i]); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i+1, err, l)
		}
	}
	if temp, ok := reqs[0]["temperature"]; !ok || string(temp) != "0" {
		t.Errorf("first line temperature %s (present %v), want 0", temp, ok)
	}
	if temp, ok := reqs[1]["temperature"]; !ok || string(temp) != "null" {
		t.Errorf("second line temperature %s (present %v), want null", temp, ok)
	}
	if !strings.Contains(got[0], `"first"`) || !strings.Contains(got[1], `"second"`) {
		t.Errorf("lines are not the requests in order:\n%s", raw)
	}
}

// TestRunJSON: `maker run --json` on the embedded services prints the
// report, and only the report, on stdout; progress goes to stderr.
func TestRunJSON(t *testing.T) {
	res := runMaker(t, 60*time.Second, "run", "--disks", "5", "--json")
	if res.code != 0 {
		t.Fatalf("run exited %d: %s", res.code, res.stderr)
	}
	rep := parseReport(t, res.stdout) // fails on anything but one JSON object
	if !rep.Solved || rep.Steps != 31 || rep.TraceSHA256 != goldenTrace(t, 5) {
		t.Errorf("state %s, steps %d, trace %s: want solved, 31, the true solution", rep.State, rep.Steps, rep.TraceSHA256)
	}
	checkAccounting(t, rep)
	if !strings.Contains(res.stderr, "31/31 steps") {
		t.Errorf("no final progress line on stderr: %q", res.stderr)
	}

	text := runMaker(t, 60*time.Second, "run", "--disks", "5", "--quiet")
	if text.code != 0 {
		t.Fatalf("run (text) exited %d: %s", text.code, text.stderr)
	}
	for _, want := range []string{"SOLVED", "steps            31 / 31", "trace sha256     " + rep.TraceSHA256} {
		if !strings.Contains(text.stdout, want) {
			t.Errorf("text report lacks %q:\n%s", want, text.stdout)
		}
	}
	if text.stderr != "" {
		t.Errorf("--quiet still wrote to stderr: %q", text.stderr)
	}
}

// TestRunBelowHalfAccuracyWithK: a simulated model no better than a coin
// toss leaves k unchosen, but with --k given the run goes ahead (with no
// theory figures: there is no usable estimate of p).
func TestRunBelowHalfAccuracyWithK(t *testing.T) {
	res := runMaker(t, 60*time.Second, "run", "--disks", "3", "--sim-accuracy", "0.5", "--k", "2", "--json", "--quiet")
	if res.code != 0 {
		t.Fatalf("run exited %d: %s", res.code, res.stderr)
	}
	rep := parseReport(t, res.stdout)
	if rep.K != 2 || rep.Steps < 1 || rep.PEstimate != 0 || rep.ExpectedSamplesPerStep != 0 {
		t.Errorf("k %d, steps %d, p_estimate %v, expected samples/step %v; want k 2, steps run, no theory",
			rep.K, rep.Steps, rep.PEstimate, rep.ExpectedSamplesPerStep)
	}
}

// TestBenchJSON: `maker bench --json` runs and reports its figures (their
// values depend on the machine and are not checked).
func TestBenchJSON(t *testing.T) {
	res := runMaker(t, 120*time.Second, "bench", "--disks", "5", "--runs", "1", "--json")
	if res.code != 0 {
		t.Fatalf("bench exited %d: %s", res.code, res.stderr)
	}
	m := parseJSONOnly(t, res.stdout)
	for _, k := range []string{"steps_per_second", "per_step_overhead_us", "samples_per_step", "expected_samples_per_step"} {
		if v := num(t, m, k); !(v > 0) {
			t.Errorf("%s = %v, want > 0", k, v)
		}
	}
	near(t, m, "steps", 31, 0)
	near(t, m, "runs", 1, 0)
	if m["solved"] != true {
		t.Errorf("bench job not solved: %v", m["solved"])
	}
}

// TestUnreachableRedisOneError: a command whose Redis does not answer
// fails with one error of ours naming the server, not go-redis's own
// connection-pool log lines ahead of it.
func TestUnreachableRedisOneError(t *testing.T) {
	svc := startServices(t, false)
	port, err := testkit.FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	redisURL := "redis://127.0.0.1:" + strconv.Itoa(port) + "/0"
	for _, args := range [][]string{
		{"coordinator", "--nats", svc.natsURL, "--redis", redisURL},
		{"run", "--disks", "3", "--redis", redisURL},
	} {
		res := runMaker(t, 60*time.Second, args...)
		if res.code != cli.ExitError || len(lines(res.stderr)) != 1 ||
			!strings.HasPrefix(res.stderr, "maker: redis at "+redisURL) || !strings.Contains(res.stderr, "connection refused") {
			t.Errorf("maker %s: exit %d, stderr %q; want exit %d and only \"maker: redis at %s: ... connection refused\"",
				args[0], res.code, res.stderr, cli.ExitError, redisURL)
		}
	}
}
