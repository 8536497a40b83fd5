package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// unreachableNATS is a NATS URL nothing listens on.
const unreachableNATS = "nats://127.0.0.1:1"

// TestCalibrateSimulated: the command, without a fleet: the JSON
// has p with its interval, which holds the simulated model's accuracy
// (95 % Clopper-Pearson interval, seeded), the valid fraction and tokens
// per call; the store is skipped with --no-store.
func TestCalibrateSimulated(t *testing.T) {
	t.Parallel()
	res := runMain(t, "calibrate", "--task", "hanoi", "--params", `{"disks":10}`, "--model", "sim-1",
		"--sim-accuracy", "0.998", "--samples", "2000", "--json", "--no-store", "-q")
	if res.code != ExitOK {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(res.stdout), &raw); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, res.stdout)
	}
	for _, k := range []string{"p", "p_low", "p_high", "valid_fraction", "valid_low", "valid_high", "tokens_per_call", "prompt_tokens_mean", "completion_tokens_mean", "confidence", "seed", "measured_at", "prompt_version", "model", "task"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("the JSON has no %q", k)
		}
	}
	var c schemas.Calibration
	if err := schemas.Decode([]byte(res.stdout), &c); err != nil {
		t.Fatalf("not a calibration record: %v", err)
	}
	if !(c.PLow <= 0.998 && 0.998 <= c.PHigh) || c.Samples != 2000 || c.ValidFraction != 1 || c.TokensPerCall <= 0 {
		t.Errorf("p %v [%v, %v] (95 %% Clopper-Pearson) of %d samples, valid %v, tokens %v; want 0.998 inside", c.P, c.PLow, c.PHigh, c.Samples, c.ValidFraction, c.TokensPerCall)
	}
	if c.Model != "sim-1" || c.Task != "hanoi" || c.Confidence != 0.95 || c.Seed != 1 {
		t.Errorf("record %+v", c)
	}
	if strings.Contains(res.stderr, "not storing") {
		t.Errorf("--no-store, yet: %s", res.stderr)
	}
}

// TestCalibrateText: the table, red flags by reason, from a spec file.
func TestCalibrateText(t *testing.T) {
	t.Parallel()
	res := runMain(t, "calibrate", "--task-file", "../../../examples/tasks/multiply.yaml", "--params", `{"a":"1234","b":"5678"}`, "--model", "sim-1",
		"--sim-accuracy", "0.9", "--sim-malformed-rate", "0.1", "--samples", "300", "--no-store", "-q")
	if res.code != ExitOK {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	for _, want := range []string{"calibration of sim-1 on multiply@", "p (a valid sample is right)", "valid fraction", "red flags: parse ", "tokens per call", "95 % clopper-pearson"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("no %q in\n%s", want, res.stdout)
		}
	}
}

// TestCalibrateRefuses: every kind of bad input is a usage error (exit 2)
// that says what is wrong, before any model is asked.
func TestCalibrateRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noRef := filepath.Join(dir, "noref.yaml")
	src, err := os.ReadFile("../../../examples/tasks/classify.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(l, "reference:") {
			kept = append(kept, l)
		}
	}
	if err := os.WriteFile(noRef, []byte(strings.Join(kept, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"calibrate", "--no-store", "-q", "--nats", unreachableNATS, "--model", "sim-1"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"zero samples", []string{"--samples", "0"}, "--samples 0 must be between 1 and 1000000"},
		{"negative samples", []string{"--samples", "-5"}, "--samples -5 must be"},
		{"too many samples", []string{"--samples", "1000001"}, "--samples 1000001 must be"},
		{"samples not a number", []string{"--samples", "lots"}, `invalid argument "lots"`},
		{"confidence 0", []string{"--confidence", "0"}, "--confidence 0 must be in (0, 1)"},
		{"confidence 1", []string{"--confidence", "1"}, "--confidence 1 must be in (0, 1)"},
		{"confidence 95", []string{"--confidence", "95"}, "--confidence 95 must be in (0, 1)"},
		{"confidence NaN", []string{"--confidence", "NaN"}, "--confidence NaN must be in (0, 1)"},
		{"concurrency 0", []string{"--concurrency", "0"}, "--concurrency 0 must be between 1 and 10000"},
		{"temperature", []string{"--temperature", "-1"}, "--temperature -1 must be between 0 and 2"},
		{"max output tokens", []string{"--max-output-tokens", "0"}, "--max-output-tokens 0 must be >= 1"},
		{"unknown task", []string{"--task", "sudoku", "--params", "{}"}, `unknown task "sudoku": no built-in task has that name (hanoi)`},
		{"bad task ref", []string{"--task", "a@b@c"}, "task"},
		{"task and task file", []string{"--task", "hanoi", "--task-file", noRef}, "give --task or --task-file, not both"},
		{"missing task file", []string{"--task-file", filepath.Join(dir, "none.yaml")}, "task spec: open"},
		{"spec without reference", []string{"--task-file", noRef, "--params", `{"choices":["a","b"],"records":["x"]}`},
			"calibration needs a task that can judge answers: hanoi, or a spec with a reference"},
		{"reference null for these params", []string{"--task-file", "../../../examples/tasks/classify.yaml", "--params", `{"choices":["a","b"],"records":["x"]}`},
			"calibration needs a task that can judge answers: hanoi, or a spec with a reference"},
		{"params not JSON", []string{"--params", "{disks: 3"}, "--params is not valid JSON"},
		{"params refused", []string{"--params", `{"disks":0}`}, "disks must be between 1 and 30"},
		{"params for a spec missing", []string{"--task-file", "../../../examples/tasks/multiply.yaml"}, "--params is required"},
		{"no model", []string{"--model", ""}, "--model is required"},
		{"blank model", []string{"--model", " "}, "--model is required"},
		{"sim flag with a real model", []string{"--llm-base-url", "http://127.0.0.1:1/v1", "--model", "m", "--sim-accuracy", "0.9"}, "--sim-accuracy: the simulated model's flags"},
		{"sim accuracy", []string{"--sim-accuracy", "1.5"}, "--sim-accuracy 1.5 must be in (0, 1]"},
		{"sim rates", []string{"--sim-malformed-rate", "0.8", "--sim-overlong-rate", "0.5"}, "exceeds 1"},
		{"unknown subcommand", []string{"shw"}, `unknown command "shw" for "maker calibrate"; did you mean show?`},
		{"unknown flag", []string{"--sample", "3"}, "unknown flag: --sample"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runMain(t, append(append([]string{}, base...), tt.args...)...)
			if res.code != ExitUsage || !strings.Contains(res.stderr, tt.want) || res.stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", res.code, res.stdout, res.stderr, ExitUsage, tt.want)
			}
		})
	}
}

// TestCalibrateStoreAndUse on a real nats-server: the calibration is
// stored, listed by show, and plan takes p, the valid fraction and the
// tokens per call from it, saying so; without a reachable server the
// measurement is printed with a note; a non-admin identity may not store.
func TestCalibrateStoreAndUse(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t)
	// Nothing stored: show says so and creates nothing.
	if show := runMain(t, "calibrate", "show", "--nats", srv.URL); show.code != ExitOK || !strings.Contains(show.stdout, "no calibrations stored") {
		t.Errorf("show on an empty server: exit %d, %q %q", show.code, show.stdout, show.stderr)
	}
	_, js := testkit.Connect(t, srv.URL)
	for n := range js.StreamNames(t.Context()).Name() {
		t.Errorf("show created stream %s", n)
	}
	res := runMain(t, "calibrate", "--params", `{"disks":8}`, "--model", "sim-1", "--sim-accuracy", "0.99", "--sim-malformed-rate", "0.05",
		"--samples", "500", "--nats", srv.URL, "-q", "--json")
	if res.code != ExitOK || !strings.Contains(res.stderr, "stored in maker_calibrations as hanoi.sim-1.") {
		t.Fatalf("exit %d, stderr %s", res.code, res.stderr)
	}
	var c schemas.Calibration
	if err := json.Unmarshal([]byte(res.stdout), &c); err != nil {
		t.Fatal(err)
	}

	show := runMain(t, "calibrate", "show", "--nats", srv.URL, "--json")
	var list []schemas.Calibration
	if err := json.Unmarshal([]byte(show.stdout), &list); show.code != ExitOK || err != nil || len(list) != 1 || list[0].P != c.P {
		t.Fatalf("show: exit %d, %v, %s %s", show.code, err, show.stdout, show.stderr)
	}
	if other := runMain(t, "calibrate", "show", "--nats", srv.URL, "--model", "gpt-x"); other.code != ExitOK || !strings.Contains(other.stdout, "no calibrations stored") {
		t.Errorf("show another model: exit %d, %s", other.code, other.stdout)
	}
	if text := runMain(t, "calibrate", "show", "--nats", srv.URL); text.code != ExitOK || !strings.Contains(text.stdout, "hanoi") || !strings.Contains(text.stdout, "sim-1") {
		t.Errorf("show: exit %d, %s", text.code, text.stdout)
	}

	pl := runMain(t, "plan", "--disks", "20", "--model", "sim-1", "--nats", srv.URL, "--json")
	var plan map[string]any
	if err := json.Unmarshal([]byte(pl.stdout), &plan); pl.code != ExitOK || err != nil {
		t.Fatalf("plan: exit %d, %v\n%s%s", pl.code, err, pl.stdout, pl.stderr)
	}
	if plan["p"] != c.P || plan["valid_fraction"] != c.ValidFraction || !strings.HasPrefix(plan["p_source"].(string), "calibration ") {
		t.Errorf("plan took p %v, valid %v from %v; the calibration says %v, %v", plan["p"], plan["valid_fraction"], plan["p_source"], c.P, c.ValidFraction)
	}
	// An explicit --p wins.
	if pl := runMain(t, "plan", "--disks", "20", "--model", "sim-1", "--nats", srv.URL, "--p", "0.999", "--json"); !strings.Contains(pl.stdout, `"p": 0.999`) || strings.Contains(pl.stdout, "p_source") {
		t.Errorf("plan --p: %s", pl.stdout)
	}
	// No calibration of that model: a usage error naming the way out.
	if pl := runMain(t, "plan", "--disks", "20", "--model", "gpt-x", "--nats", srv.URL); pl.code != ExitUsage || !strings.Contains(pl.stderr, "no calibration of gpt-x on hanoi") {
		t.Errorf("plan, no calibration: exit %d %s", pl.code, pl.stderr)
	}

	// submit takes p and the valid fraction from the voters' model's
	// calibration, and says so.
	if top := runMain(t, "topology", "create", "--nats", srv.URL); top.code != ExitOK {
		t.Fatalf("topology create: %d %s", top.code, top.stderr)
	}
	sub := runMain(t, "submit", "--nats", srv.URL, "--calibration-model", "sim-1", "--disks", "12", "--json")
	want := fmt.Sprintf("p %.4g and valid fraction %.4g from calibration ", c.P, c.ValidFraction)
	if sub.code != ExitOK || !strings.Contains(sub.stderr, want) {
		t.Errorf("submit: exit %d, stderr %q; want %q", sub.code, sub.stderr, want)
	}
	if sub := runMain(t, "submit", "--nats", srv.URL, "--calibration-model", "sim-1", "--disks", "12", "--p", "0.9", "--json"); sub.code != ExitOK || strings.Contains(sub.stderr, "from calibration") {
		t.Errorf("submit --p: exit %d, stderr %q", sub.code, sub.stderr)
	}

	// A task spec registered with the fleet is found there.
	if reg := runMain(t, "task", "register", "../../../examples/tasks/multiply.yaml", "--nats", srv.URL); reg.code != ExitOK {
		t.Fatalf("task register: %d %s", reg.code, reg.stderr)
	}
	res = runMain(t, "calibrate", "--task", "multiply", "--params", `{"a":"314","b":"27"}`, "--model", "sim-1", "--sim-accuracy", "0.9",
		"--samples", "200", "--nats", srv.URL, "--no-store", "-q", "--json")
	var spec schemas.Calibration
	if err := json.Unmarshal([]byte(res.stdout), &spec); res.code != ExitOK || err != nil || spec.Task != "multiply" || spec.TaskHash == "" || spec.Valid != 200 {
		t.Errorf("registered spec: exit %d, %v, %s %s", res.code, err, res.stdout, res.stderr)
	}

	// Unreachable: measured and printed, with a note.
	res = runMain(t, "calibrate", "--params", `{"disks":4}`, "--model", "sim-1", "--samples", "20", "--nats", unreachableNATS, "-q")
	if res.code != ExitOK || !strings.Contains(res.stdout, "p (a valid sample is right)") || !strings.Contains(res.stderr, "maker: not storing the calibration") {
		t.Errorf("unreachable NATS: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	// A role other than the admin reads calibrations; it does not write them.
	res = runMain(t, "calibrate", "--model", "sim-1", "--samples", "20", "--nats", srv.URL, "--nats-identity", "voter", "-q")
	if res.code != ExitUsage || !strings.Contains(res.stderr, "storing a calibration needs the admin identity") {
		t.Errorf("the voter stores: exit %d, stderr %q", res.code, res.stderr)
	}
}
