package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// classifyParams writes classify.yaml params of n records (with truth) to
// a file and returns "@file" and its size.
func classifyParams(t *testing.T, n, recordBytes int) (string, int) {
	t.Helper()
	labels := []string{"positive", "negative", "neutral"}
	records, truth := make([]string, n), make([]string, n)
	pad := strings.Repeat("x", max(0, recordBytes-20))
	for i := range records {
		records[i] = fmt.Sprintf("record %06d %s", i, pad)
		truth[i] = labels[i%3]
	}
	data, err := json.Marshal(map[string]any{"choices": labels, "records": records, "truth": truth})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "params.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return "@" + path, len(data)
}

// TestTaskTestBigInput: params larger than a NATS message (1.4 MB) run,
// by reference: the job is solved to its step limit and its report names
// the params by their hash.
func TestTaskTestBigInput(t *testing.T) {
	t.Parallel()
	params, size := classifyParams(t, 20_000, 65)
	if size < 1_400_000 {
		t.Fatalf("params of %d bytes: the case wants more than a message", size)
	}
	res := runMain(t, "task", "test", example("classify.yaml"), "--params", params, "--steps", "30", "--json")
	var rep schemas.JobReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.code != ExitOK {
		t.Fatalf("exit %d, %v: stdout %.300q, stderr %q", res.code, err, res.stdout, res.stderr)
	}
	if rep.Steps != 30 || rep.TotalSteps != 20_000 || rep.Errors != 0 || !schemas.ValidInputRef(rep.ParamsRef) || string(rep.Params) != "null" {
		t.Errorf("steps %d/%d, errors %d, params_ref %q, %d bytes of params inline; want 30/20000, 0, a reference and none",
			rep.Steps, rep.TotalSteps, rep.Errors, rep.ParamsRef, len(rep.Params))
	}
}

// TestInputLimits: params and states over the fleet's limits are refused
// before anything runs, naming the size and the limit (exit 2), by task
// test, run and submit alike.
func TestInputLimits(t *testing.T) {
	t.Parallel()
	tooBig, _ := classifyParams(t, 330_000, 100) // about 33 MiB
	// A spec whose initial state copies the params' items: a state that
	// grows with the input.
	copyState := writeFile(t, "copy.yaml", edit(t, counterSpec,
		"    n: {type: integer, minimum: 1, maximum: 1000}", "    n: {type: integer, minimum: 1, maximum: 1000}\n    items: {type: array}",
		`initial: '{"count": 0}'`, `initial: '{"count": 0, "items": params.items}'`))
	items := make([]string, 3000)
	for i := range items {
		items[i] = strings.Repeat("y", 100)
	}
	bigState, _ := json.Marshal(map[string]any{"n": 3, "items": items})
	s := startFleetServer(t)
	if res := s.maker(t, "task", "register", copyState); res.code != ExitOK {
		t.Fatalf("register: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, tc := range []struct {
		name string
		res  outcome
		want string
	}{
		{"task test, params", runMain(t, "task", "test", example("classify.yaml"), "--params", tooBig), "over the fleet's limit of 32.0 MiB"},
		{"run, params", runMain(t, "run", "--task-file", example("classify.yaml"), "--params", tooBig), "over the fleet's limit of 32.0 MiB"},
		{"task test, state", runMain(t, "task", "test", copyState, "--params", string(bigState)),
			"the initial state is 309021 bytes, over the limit of 262144"},
		{"submit, state", s.maker(t, "submit", "--task", "counter", "--params", string(bigState), "--k", "1"),
			"the initial state is 309021 bytes, over the limit of 262144"},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, tc.res, tc.want) })
	}
}

// TestTaskTestTimeout: --timeout ends a job that runs too long with its
// partial report and exit 124, never a hang.
func TestTaskTestTimeout(t *testing.T) {
	t.Parallel()
	res := runMain(t, "task", "test", example("multiply.yaml"), "--params", `{"a":"123456789","b":"987654321"}`,
		"--steps", "0", "--sim-latency", "200ms", "--timeout", "1s")
	if res.code != ExitTimeout || !strings.Contains(res.stdout, "  CANCELLED\n") || !strings.Contains(res.stderr, "did not finish within --timeout 1s") {
		t.Errorf("exit %d, stdout:\n%s\nstderr %q; want 124, a cancelled report and the timeout named", res.code, res.stdout, res.stderr)
	}
}

// TestTaskTestVerdict: task test's exit code gates CI: 1 for a job that
// ends without consensus, or with wrong steps.
func TestTaskTestVerdict(t *testing.T) {
	t.Parallel()
	multiply := example("multiply.yaml")
	t.Run("no consensus", func(t *testing.T) {
		t.Parallel()
		res := runMain(t, "task", "test", multiply, "--params", `{"a":"1234","b":"567"}`, "--sim-malformed-rate", "0.97", "--max-samples", "4", "--k", "3")
		if res.code != ExitError || !strings.Contains(res.stdout, "NO_CONSENSUS") || !strings.Contains(res.stderr, "the test job failed (no_consensus)") {
			t.Errorf("exit %d, stdout:\n%s\nstderr %q", res.code, res.stdout, res.stderr)
		}
	})
	t.Run("wrong steps", func(t *testing.T) {
		t.Parallel()
		res := runMain(t, "task", "test", multiply, "--params", `{"a":"99999999","b":"99999999"}`, "--sim-accuracy", "0.55", "--k", "1", "--steps", "0")
		if res.code != ExitError || !strings.Contains(res.stderr, "wrong step(s) (the verifier's)") {
			t.Errorf("exit %d, stdout:\n%s\nstderr %q", res.code, res.stdout, res.stderr)
		}
	})
}

// TestTaskValidateDryRun: validate --params walks the reference on real
// params and names the step and the cause of what a compile cannot see:
// a reference its own answer schema refuses, a template key typo, an
// expression that fails on these params, params the spec refuses.
func TestTaskValidateDryRun(t *testing.T) {
	t.Parallel()
	file := func(name string, pairs ...string) string { return writeFile(t, name, edit(t, counterSpec, pairs...)) }
	for _, tc := range []struct {
		name, file, params string
		code               int
		want               string
	}{
		{"walks", file("ok.yaml"), `{"n": 5}`, ExitOK, "dry run on --params: 5 step(s) along the reference"},
		{"reference refused by its schema", file("ref.yaml", `reference: '{"next": state.count + 1}'`, `reference: '{"next": "one"}'`), `{"n": 5}`,
			ExitUsage, `step 0: the spec's own answer rules refuse its reference answer "{\"next\":\"one\"}"`},
		{"template key typo", file("tpl.yaml", "  user: 'The count is {{.state.count}}. What comes next?'", "  user: 'The count is {{.state.cont}}.'"), `{"n": 5}`,
			ExitUsage, `step 0: prompt: `},
		{"next fails on these params", file("next.yaml", `  expr: '{"count": answer.next}'`, `  expr: '{"count": answer.next + [0, 0][state.count]}'`), `{"n": 5}`,
			ExitUsage, "step 2: next: "},
		{"params refused", file("p.yaml"), `{"n": "five"}`, ExitUsage, "params: task: invalid params"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runMain(t, "task", "validate", tc.file, "--params", tc.params)
			if res.code != tc.code || !strings.Contains(res.stdout, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", res.code, res.stdout, res.stderr, tc.code, tc.want)
			}
		})
	}
}
