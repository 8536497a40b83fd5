package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/cmd/maker/cli"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// startJudgeEnv starts NATS, the simulated model (in this process) and a
// `maker judge` process with extra flags.
func startJudgeEnv(t *testing.T, extra ...string) (natsURL string) {
	t.Helper()
	natsURL = testkit.StartNATS(t).URL
	sim, err := simllm.Start(context.Background(), "127.0.0.1:0", simllm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sim.Close(ctx)
	})
	j := startProc(t, "judge", append([]string{"judge", "--nats", natsURL, "--llm-base-url", sim.URL()}, extra...)...)
	t.Cleanup(func() {
		j.signal(syscall.SIGTERM)
		j.wait(30 * time.Second)
	})
	return natsURL
}

var triedFlags = []string{"--tried", "local_model=qwen3 blamed the network", "--tried", "frontier_model=one frontier model: retry loop, no change", "--tried", "tools=go test -race: nothing"}

// A call over the approval threshold waits for `maker judge approve`, with
// a judge configured by --config.
func TestJudgeCLIApproval(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "judge.yaml")
	// Outputs priced so that one architecture call is estimated between
	// $2.00 (approval) and $3.00 (3 × the $1.00 threshold).
	if err := os.WriteFile(cfg, []byte("panels: {architecture: [m1, m2, m3]}\njudge_model: j\ndefault_price: {input_usd_per_mtok: 1, output_usd_per_mtok: 250}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	natsURL := startJudgeEnv(t, "--config", cfg)
	bg := startProc(t, "breakglass", append([]string{"breakglass", "--nats", natsURL, "break glass: how should we split the monolith's module boundaries?",
		"--type", "architecture", "--budget", "3", "--id", "held-e2e", "--session", "e2e-approve", "--json"}, triedFlags...)...)
	waitFor(t, 60*time.Second, "the hold", func() bool { return strings.Contains(bg.stderr(), "maker judge approve held-e2e") }, bg)

	res := runMaker(t, 30*time.Second, "judge", "pending", "--nats", natsURL, "--json")
	if res.code != cli.ExitOK || !strings.Contains(res.stdout, `"request_id":"held-e2e"`) {
		t.Fatalf("pending: exit %d, %s %s", res.code, res.stdout, res.stderr)
	}
	// The requester's identity (the api, for tenants' calls) may not approve its own call;
	// the approver (the default --as) may.
	if res := runMaker(t, 30*time.Second, "judge", "approve", "held-e2e", "--nats", natsURL, "--by", "mallory", "--as", "api"); res.code != cli.ExitUsage || !strings.Contains(res.stderr, "api asked for held-e2e, and a requester never decides its own call") {
		t.Fatalf("approve by the requester: exit %d, %q %q", res.code, res.stdout, res.stderr)
	}
	if res := runMaker(t, 30*time.Second, "judge", "approve", "held-e2e", "--nats", natsURL, "--by", "alice"); res.code != cli.ExitOK || res.stdout != "approved held-e2e\n" {
		t.Fatalf("approve: exit %d, %q %q", res.code, res.stdout, res.stderr)
	}
	if code := bg.wait(90 * time.Second); code != cli.ExitOK {
		t.Fatalf("breakglass exit %d: %s", code, bg.stderr())
	}
	var answer struct {
		Outcome, Approver string
		Cost              struct {
			EstimateUSD float64 `json:"estimate_usd"`
		}
	}
	if err := json.Unmarshal([]byte(bg.stdout()), &answer); err != nil {
		t.Fatal(err)
	}
	if answer.Outcome != "answered" || answer.Approver != "alice" || answer.Cost.EstimateUSD <= 2 || answer.Cost.EstimateUSD > 3 {
		t.Errorf("answer %+v", answer)
	}
	res = runMaker(t, 30*time.Second, "judge", "audit", "--nats", natsURL, "--session", "e2e-approve")
	for _, want := range []string{"held", "approved", "answered", "alice"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("audit table lacks %q:\n%s", want, res.stdout)
		}
	}

	// The answer is the asking tenant's alone.
	if res := runMaker(t, 30*time.Second, "judge", "answer", "held-e2e", "--nats", natsURL, "--json"); res.code != cli.ExitOK || !strings.Contains(res.stdout, `"outcome": "answered"`) {
		t.Errorf("answer: exit %d, %q %q", res.code, res.stdout, res.stderr)
	}
	if res := runMaker(t, 30*time.Second, "judge", "answer", "held-e2e", "--nats", natsURL, "--tenant", "beta"); res.code != cli.ExitError || !strings.Contains(res.stderr, `no request "held-e2e" of tenant beta has an answer`) {
		t.Errorf("another tenant's answer: exit %d, %q %q", res.code, res.stdout, res.stderr)
	}
}

// The judge's command-line contract, with real processes: maker judge
// with nothing but --nats and --llm-base-url (every default panel member
// and the judge served by the simulated model), and maker breakglass.
func TestJudgeCLI(t *testing.T) {
	t.Parallel()
	natsURL := startJudgeEnv(t)
	tried := triedFlags
	ask := func(args ...string) result {
		t.Helper()
		return runMaker(t, 90*time.Second, append(append([]string{"breakglass", "--nats", natsURL}, args...), tried...)...)
	}

	res := ask("break glass: nil pointer panic in the voter after a NATS reconnect", "--session", "e2e-1", "--json")
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	var answer struct {
		Outcome   string `json:"outcome"`
		Diagnosis string `json:"diagnosis"`
		Solution  struct {
			Confidence *float64 `json:"confidence"`
		} `json:"solution"`
		Alternatives []string `json:"alternatives"`
		Risks        []string `json:"risks"`
		Cost         *struct {
			EstimateUSD float64 `json:"estimate_usd"`
			ActualUSD   float64 `json:"actual_usd"`
		} `json:"cost"`
		Panel       []string `json:"panel"`
		ProblemType string   `json:"problem_type"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &answer); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, res.stdout)
	}
	if answer.Outcome != "answered" || answer.Diagnosis == "" || answer.Solution.Confidence == nil || answer.Alternatives == nil ||
		answer.Risks == nil || answer.Cost == nil || answer.Cost.ActualUSD <= 0 || answer.ProblemType != "code_bug" ||
		strings.Join(answer.Panel, ",") != "openai/gpt-5.5,anthropic/claude-fable,moonshotai/kimi-k2.6" {
		t.Errorf("answer %+v", answer)
	}

	// Refusals exit 1 with the reason on stderr.
	res = ask("the parser is broken", "--session", "e2e-1")
	if res.code != cli.ExitError || !strings.Contains(res.stderr, `must start with "break glass:"`) {
		t.Errorf("no trigger: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runMaker(t, 90*time.Second, "breakglass", "--nats", natsURL, "break glass: the parser is broken", "--tried", "tools=grep")
	if res.code != cli.ExitError || !strings.Contains(res.stderr, "prior attempts missing") || !strings.Contains(res.stderr, "local_model, frontier_model") {
		t.Errorf("no prior attempts: exit %d, stderr %q", res.code, res.stderr)
	}
	// The session's fourth call: the first, two more, then refused.
	for i := range 2 {
		if res := ask("break glass: the panic is back", "--session", "e2e-1"); res.code != cli.ExitOK || !strings.Contains(res.stdout, "DIAGNOSIS") {
			t.Fatalf("call %d: exit %d: %s", i+2, res.code, res.stderr)
		}
	}
	res = ask("break glass: the panic is back", "--session", "e2e-1")
	if res.code != cli.ExitError || !strings.Contains(res.stderr, "session limit: 3 of 3") {
		t.Errorf("fourth call: exit %d, stderr %q", res.code, res.stderr)
	}

	// Bad input exits 2 before anything is sent.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"break glass: x", "--type", "poetry"}, `problem type "poetry"`},
		{[]string{"break glass: x", "--tried", "intuition=it felt wrong"}, "KIND must be one of"},
		{[]string{"break glass: x", "--budget", "-1"}, "budget must be"},
		{[]string{"break glass: x", "--session", "no spaces"}, "session"},
		{[]string{"break glass: x", "--log", "../outside.log"}, "leaves the root"},
		{[]string{}, `give the problem as one argument`},
	} {
		res := ask(tc.args...)
		if res.code != cli.ExitUsage || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, res.code, res.stderr, tc.want)
		}
	}
	if res := runMaker(t, 30*time.Second, "judge", "approve", "nope", "--nats", natsURL, "--by", "bob"); res.code != cli.ExitUsage || !strings.Contains(res.stderr, "not pending") {
		t.Errorf("approve unknown: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := runMaker(t, 30*time.Second, "judge", "--nats", natsURL); res.code != cli.ExitUsage || !strings.Contains(res.stderr, "--llm-base-url is required") {
		t.Errorf("judge without a model: exit %d, stderr %q", res.code, res.stderr)
	}

	// The audit trail lists every invocation of the session.
	res = runMaker(t, 30*time.Second, "judge", "audit", "--nats", natsURL, "--session", "e2e-1", "--json")
	var recs []struct {
		Outcome string `json:"outcome"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &recs); err != nil || res.code != cli.ExitOK {
		t.Fatalf("audit: exit %d, %v: %s %s", res.code, err, res.stdout, res.stderr)
	}
	var outcomes []string
	for _, r := range recs {
		outcomes = append(outcomes, r.Outcome)
	}
	if got := strings.Join(outcomes, ","); got != "answered,refused,answered,answered,refused" {
		t.Errorf("audit outcomes %s", got)
	}
}
