package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/spec"
)

// examplesDir holds the example task specs; go test runs in the package's
// directory.
var examplesDir = filepath.Join("..", "..", "..", "examples", "tasks")

func example(file string) string { return filepath.Join(examplesDir, file) }

// counterSpec is a small valid spec whose line numbers the problem lists
// below name: change one line of it to make one problem.
const counterSpec = `name: counter
version: 1.0.0
params:
  type: object
  properties:
    n: {type: integer, minimum: 1, maximum: 1000}
  required: [n]
initial: '{"count": 0}'
max_steps: params.n
prompt:
  user: 'The count is {{.state.count}}. What comes next?'
answer:
  format: json
  schema:
    type: object
    properties:
      next: {type: integer}
    required: [next]
next:
  expr: '{"count": answer.next}'
done: state.count == params.n
reference: '{"next": state.count + 1}'
`

// edit returns src with each old line replaced by its new text ("" drops
// the line); the test fails when a line is not in src.
func edit(t *testing.T, src string, pairs ...string) string {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		old, repl := pairs[i]+"\n", pairs[i+1]
		if repl != "" {
			repl += "\n"
		}
		if !strings.Contains(src, old) {
			t.Fatalf("no line %q in the spec", pairs[i])
		}
		src = strings.Replace(src, old, repl, 1)
	}
	return src
}

// writeFile writes content to name in a new temporary directory and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lines splits output into its lines, without the last newline.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// compact is raw without spaces.
func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	return b.String()
}

// refused checks that a command exited with the usage code, printed
// nothing on stdout and said want on stderr.
func refused(t *testing.T, res outcome, want string) {
	t.Helper()
	if res.code != ExitUsage || res.stdout != "" || !strings.HasPrefix(res.stderr, "maker: ") || !strings.Contains(res.stderr, want) {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, nothing on stdout and %q on stderr",
			res.code, res.stdout, res.stderr, ExitUsage, want)
	}
}

// TestTaskValidateExamples: every example spec validates, in text and in
// JSON, naming itself and its content hash.
func TestTaskValidateExamples(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ file, name string }{
		{"hanoi.yaml", "hanoi-spec"},
		{"multiply.yaml", "multiply"},
		{"ledger.yaml", "ledger"},
		{"classify.yaml", "classify"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			path := example(tc.file)
			hash := spec.Hash([]byte(readFile(t, path)))
			res := runMain(t, "task", "validate", path)
			if want := path + ": ok: " + tc.name + "@1.0.0 (" + hash + ")\n"; res.code != ExitOK || res.stdout != want || res.stderr != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 0 and %q", res.code, res.stdout, res.stderr, want)
			}
			res = runMain(t, "task", "validate", path, "--json")
			var got struct {
				Valid         bool
				Name, Version string
				Hash          string
			}
			if err := json.Unmarshal([]byte(res.stdout), &got); err != nil || res.code != ExitOK {
				t.Fatalf("--json: exit %d, %v: %q", res.code, err, res.stdout)
			}
			if !got.Valid || got.Name != tc.name || got.Version != "1.0.0" || got.Hash != hash {
				t.Errorf("--json: %+v, want valid %s@1.0.0 %s", got, tc.name, hash)
			}
		})
	}
}

// TestTaskValidateProblems: an invalid spec exits with the usage code and
// prints every problem on stdout, each with its path and place in the
// file, in file order; stderr counts them. The same problems come as JSON
// with --json.
func TestTaskValidateProblems(t *testing.T) {
	t.Parallel()
	regex := "  format: regex\n  regex: '(?P<next>[0-'\n  groups: {next: json}\n  render: '{\"next\": {{.answer.next}}}'"
	for _, tc := range []struct {
		name string
		src  string
		// want are the problems, in order: each printed line starts
		// with one.
		want []string
	}{
		{"YAML syntax", "name: counter\n  version: [1\n",
			[]string{"(spec) (line 2): not valid YAML or JSON: line 2: mapping values are not allowed in this context"}},
		{"JSON syntax", `{"name": "counter", "version": "1.0.0"`,
			[]string{"(spec) (line 1): not valid YAML or JSON: line 1: did not find expected ',' or '}'"}},
		{"text after the JSON", `{"name": "counter", "version": "1.0.0"} and more`,
			[]string{"(spec): not valid YAML or JSON: did not find expected <document start>"}},
		{"two documents", counterSpec + "---\nname: other\n",
			[]string{"(spec) (line 23, column 1): more than one document in the file"}},
		{"a second document that does not parse", counterSpec + "---\nname: [\n",
			[]string{"(spec) (line 24): not valid YAML or JSON: "}},
		{"empty file", "", []string{"(spec): not valid YAML or JSON"}},
		{"missing required fields", "name: counter\nversion: 1.0.0\nparams: {type: object}\n", []string{
			"answer (line 1, column 1): missing (required)",
			"answer.schema (line 1, column 1): a JSON Schema is required",
			"done (line 1, column 1): missing (required)",
			"initial (line 1, column 1): missing (required)",
			"max_steps (line 1, column 1): missing (required)",
			"next (line 1, column 1): missing (required)",
			"next (line 1, column 1): give field (the answer field that is the next state) or expr",
			"prompt (line 1, column 1): missing (required)",
		}},
		{"unknown field", counterSpec + "colour: blue\n",
			[]string{"colour (line 23, column 1): unknown field"}},
		{"key given twice", counterSpec + "done: true\n",
			[]string{"done (line 23, column 1): key given twice"}},
		{"bad name", edit(t, counterSpec, "name: counter", "name: Counter!"),
			[]string{"name (line 1, column 1): 'Counter!' does not match pattern '^[a-z][a-z0-9_-]{0,31}$'"}},
		{"built-in name", edit(t, counterSpec, "name: counter", "name: hanoi"),
			[]string{`name: "hanoi" is a built-in task's name; give the spec another name`}},
		{"built-in name and another problem", edit(t, counterSpec, "name: counter", "name: hanoi", "done: state.count == params.n", "done: state.count + 1"),
			[]string{`name: "hanoi" is a built-in task's name; give the spec another name`, "done (line 21, column 1): gives int, want bool"}},
		{"CEL syntax error", edit(t, counterSpec, `initial: '{"count": 0}'`, `initial: '{"count": 0'`),
			[]string{"initial (line 8, column 22): CEL: Syntax error: "}},
		{"CEL unknown variable", edit(t, counterSpec, "max_steps: params.n", "max_steps: param.n"),
			[]string{"max_steps (line 9, column 12): CEL: undeclared reference to 'param'"}},
		{"CEL variable out of scope", edit(t, counterSpec, `initial: '{"count": 0}'`, `initial: '{"count": state.count}'`),
			[]string{`initial (line 8, column 1): "state" is not available here (this expression sees [params])`}},
		{"CEL type: done gives an int", edit(t, counterSpec, "done: state.count == params.n", "done: state.count + 1"),
			[]string{"done (line 21, column 1): gives int, want bool"}},
		{"CEL type: max_steps gives a string", edit(t, counterSpec, "max_steps: params.n", `max_steps: '"ten"'`),
			[]string{"max_steps (line 9, column 1): gives string, want int"}},
		{"CEL cost limit", edit(t, counterSpec, `initial: '{"count": 0}'`, `initial: '{"count": lists.range(100000000).size()}'`),
			[]string{"initial (line 8, column 1): cost limit exceeded: even its cheapest run costs "}},
		{"template does not parse", edit(t, counterSpec,
			"  user: 'The count is {{.state.count}}. What comes next?'", "  user: 'The count is {{.state.count'"),
			[]string{"prompt.user (line 11, column 3): template: prompt.user:1: unclosed action"}},
		{"template unknown function", edit(t, counterSpec,
			"  user: 'The count is {{.state.count}}. What comes next?'", "  user: 'The count is {{.state.count | nosuch}}'"),
			[]string{`prompt.user (line 11, column 3): template: prompt.user:1: function "nosuch" not defined`}},
		{"bad regex", edit(t, counterSpec, "  format: json", regex),
			[]string{"answer.regex (line 14, column 3): not a valid regular expression: missing closing ]: `[0-`"}},
		{"vote names no answer field", counterSpec + "vote: [nxt]\n",
			[]string{`vote[0] (line 23, column 8): "nxt" is not a field of the answer`}},
		{"every problem at once", edit(t, counterSpec+"colour: blue\n",
			`initial: '{"count": 0}'`, `initial: '{"count": 0'`,
			"  user: 'The count is {{.state.count}}. What comes next?'", "  user: 'The count is {{.state.count'",
			"  format: json", regex,
			"done: state.count == params.n", "done: state.count + 1",
			`reference: '{"next": state.count + 1}'`, `reference: '{"next": lists.range(100000000).size()}'`,
		), []string{
			"initial (line 8, column 22): CEL: Syntax error: ",
			"prompt.user (line 11, column 3): template: prompt.user:1: unclosed action",
			"answer.regex (line 14, column 3): not a valid regular expression: missing closing ]: `[0-`",
			"done (line 24, column 1): gives int, want bool",
			"reference (line 25, column 1): cost limit exceeded",
			"colour (line 26, column 1): unknown field",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, "spec.yaml", tc.src)
			res := runMain(t, "task", "validate", path)
			got := lines(res.stdout)
			ok := res.code == ExitUsage && len(got) == len(tc.want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.HasPrefix(got[i], path+": "+tc.want[i])
			}
			if !ok {
				t.Errorf("exit %d, stdout:\n%s\nwant exit %d and these problems, one a line:\n%s",
					res.code, res.stdout, ExitUsage, strings.Join(tc.want, "\n"))
			}
			if want := "maker: " + path + ": " + strconv.Itoa(len(tc.want)) + " problem(s)\n"; res.stderr != want {
				t.Errorf("stderr %q, want %q", res.stderr, want)
			}

			res = runMain(t, "task", "validate", "--json", path)
			var rep struct {
				Valid    *bool
				Problems []spec.Problem
			}
			if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
				t.Fatalf("--json: not JSON (%v): %q", err, res.stdout)
			}
			if res.code != ExitUsage || rep.Valid == nil || *rep.Valid || len(rep.Problems) != len(tc.want) {
				t.Fatalf("--json: exit %d, %s; want exit %d, valid false and %d problems", res.code, res.stdout, ExitUsage, len(tc.want))
			}
			for i, p := range rep.Problems {
				if !strings.HasPrefix(p.String(), tc.want[i]) || p.Msg == "" {
					t.Errorf("--json problem %d: %+v, want %q", i, p, tc.want[i])
				}
			}
		})
	}
}

// TestTaskValidateNoFile: a file that is not there, or a directory, is
// refused with the system's reason, and nothing is printed on stdout.
func TestTaskValidateNoFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.yaml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"task", "validate", missing}, "open " + missing + ": no such file or directory"},
		{[]string{"task", "validate", "--json", missing}, "open " + missing + ": no such file or directory"},
		{[]string{"task", "validate", dir}, "read " + dir + ": is a directory"},
		{[]string{"task", "validate"}, "expected FILE (a task spec), got 0 arguments"},
		{[]string{"task", "validate", "a.yaml", "b.yaml"}, "expected FILE (a task spec), got 2 arguments"},
	} {
		refused(t, runMain(t, tc.args...), tc.want)
	}
}

// TestTaskInit: init writes a starter spec that validates and runs; it
// never overwrites a file without --force, and refuses a name no spec may
// have, writing nothing.
func TestTaskInit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "counter.yaml")
	res := runMain(t, "task", "init", "counter", "-o", out)
	if res.code != ExitOK || !strings.HasPrefix(res.stdout, "wrote "+out+": try it with\n") || res.stderr != "" {
		t.Fatalf("init: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	starter := readFile(t, out)
	if !strings.Contains(starter, "\nname: counter\n") {
		t.Errorf("the starter spec is not named counter:\n%s", starter)
	}
	if res := runMain(t, "task", "validate", out); res.code != ExitOK || !strings.HasPrefix(res.stdout, out+": ok: counter@0.1.0 (sha256:") {
		t.Errorf("validate the starter: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	// The command init prints to try it.
	res = runMain(t, "task", "test", out, "--params", `{"n": 5}`)
	if res.code != ExitOK || !strings.Contains(res.stdout, " counter") || !strings.Contains(res.stdout, ` {"n":5}  k=`) || !strings.Contains(res.stdout, "SOLVED") ||
		!strings.Contains(res.stdout, "steps            5 / 5   wrong steps (verifier) 0") {
		t.Errorf("test the starter: exit %d, stdout %q, stderr %q; want it solved in 5 steps", res.code, res.stdout, res.stderr)
	}

	// No overwriting without --force.
	if err := os.WriteFile(out, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused(t, runMain(t, "task", "init", "counter", "-o", out), out+" exists: nothing written (--force overwrites it)")
	if got := readFile(t, out); got != "mine\n" {
		t.Errorf("a refused init changed the file: %q", got)
	}
	if res := runMain(t, "task", "init", "counter", "-o", out, "--force"); res.code != ExitOK {
		t.Errorf("init --force: exit %d, stderr %q", res.code, res.stderr)
	}
	if got := readFile(t, out); got != starter {
		t.Errorf("init --force wrote %q, want the starter spec", got)
	}

	// Names no spec may have, and a place init cannot write to.
	empty := t.TempDir()
	for _, tc := range []struct{ name, want string }{
		{"Counter", `task name "Counter": 1-32 of a-z, 0-9, '_' and '-', starting with a letter`},
		{"1st", `task name "1st"`},
		{"has space", `task name "has space"`},
		{"a.b", `task name "a.b"`},
		{"../escape", `task name "../escape"`},
		{strings.Repeat("a", 33), `task name "` + strings.Repeat("a", 33) + `"`},
		{"hanoi", `"hanoi" is a built-in task's name; choose another`},
	} {
		refused(t, runMain(t, "task", "init", tc.name, "-o", filepath.Join(empty, "x.yaml")), tc.want)
	}
	noDir := filepath.Join(empty, "no", "such", "dir", "x.yaml")
	res = runMain(t, "task", "init", "counter", "-o", noDir)
	refused(t, res, "open "+noDir+": no such file or directory")
	if strings.Contains(res.stderr, "--force") {
		t.Errorf("stderr %q suggests --force, which would not help", res.stderr)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("refused inits wrote %v", ents)
	}
}

// TestTaskInitDefaultFile: without -o, init writes NAME.yaml in the
// working directory. (Not parallel: it changes the working directory.)
func TestTaskInitDefaultFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	res := runMain(t, "task", "init", "my_task-2")
	if res.code != ExitOK || !strings.HasPrefix(res.stdout, "wrote my_task-2.yaml: try it with\n  maker task validate my_task-2.yaml\n") {
		t.Fatalf("exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if res := runMain(t, "task", "validate", "my_task-2.yaml"); res.code != ExitOK {
		t.Errorf("validate: exit %d, stdout %q", res.code, res.stdout)
	}
	refused(t, runMain(t, "task", "init", "my_task-2"), "my_task-2.yaml exists: nothing written (--force overwrites it)")
}

// TestTaskTest: task test runs a spec on an in-process fleet against the
// simulated model and prints the report, in text or JSON, stopping at
// --steps.
func TestTaskTest(t *testing.T) {
	t.Parallel()
	multiply := example("multiply.yaml")
	t.Run("text", func(t *testing.T) {
		t.Parallel()
		res := runMain(t, "task", "test", multiply, "--params", `{"a":"1234","b":"567"}`, "--steps", "20")
		for _, want := range []string{
			" multiply", ` {"a":"1234","b":"567"}  k=`, "  SOLVED\n",
			"  steps            16 / 16   wrong steps (verifier) 0\n", "  trace sha256     ",
		} {
			if !strings.Contains(res.stdout, want) {
				t.Errorf("report lacks %q", want)
			}
		}
		if res.code != ExitOK || t.Failed() {
			t.Errorf("exit %d, stdout:\n%s\nstderr %q", res.code, res.stdout, res.stderr)
		}
	})
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		res := runMain(t, "task", "test", multiply, "--params", `{"a":"1234","b":"567"}`, "--json")
		var rep schemas.JobReport
		if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.code != ExitOK {
			t.Fatalf("exit %d, %v: %q, stderr %q", res.code, err, res.stdout, res.stderr)
		}
		hash := spec.Hash([]byte(readFile(t, multiply)))
		// 1234 × 567 = 699678, least significant digit first.
		if rep.State != schemas.StateSolved || rep.Task != "multiply" || rep.TaskVersion != "1.0.0" || rep.TaskHash != hash ||
			rep.Steps != 16 || rep.Errors != 0 || !strings.HasPrefix(compact(t, rep.FinalState), `{"acc":[8,7,6,9,9,6,0],`) {
			t.Errorf("report %s", res.stdout)
		}
	})
	t.Run("step limit", func(t *testing.T) {
		t.Parallel()
		res := runMain(t, "task", "test", multiply, "--params", `{"a":"1234","b":"567"}`, "--steps", "3")
		if res.code != ExitOK || !strings.Contains(res.stdout, "  UNSOLVED\n") || !strings.Contains(res.stdout, "steps            3 / 16") {
			t.Errorf("exit %d, stdout:\n%s\nwant the job stopped after 3 of 16 steps", res.code, res.stdout)
		}
	})
}

// TestTaskTestRefused: task test refuses, before it starts a fleet, a spec
// or params it cannot run, and a spec the simulated model cannot answer.
func TestTaskTestRefused(t *testing.T) {
	t.Parallel()
	multiply, classify := example("multiply.yaml"), example("classify.yaml")
	noRef := writeFile(t, "noref.yaml", edit(t, counterSpec, `reference: '{"next": state.count + 1}'`, ""))
	builtinName := writeFile(t, "hanoi.yaml", edit(t, counterSpec, "name: counter", "name: hanoi"))
	invalid := writeFile(t, "bad.yaml", edit(t, counterSpec, "done: state.count == params.n", "done: state.count + 1"))
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"params fail the schema", []string{multiply, "--params", `{"a":"12x"}`},
			"task: invalid params: multiply params: /: missing property 'b'; /a: '12x' does not match pattern"},
		{"params of the wrong type", []string{multiply, "--params", `{"a":12,"b":"3"}`}, "invalid params: multiply params: /a: "},
		{"params not an object", []string{multiply, "--params", `["12","3"]`}, "invalid params: multiply params must be a JSON object"},
		{"params not JSON", []string{multiply, "--params", `{"a":`}, `--params is not valid JSON: {"a":`},
		{"params file missing", []string{multiply, "--params", "@" + missing}, "--params @" + missing + ": open " + missing + ": no such file or directory"},
		{"no params", []string{multiply}, "--params is required"},
		{"negative steps", []string{multiply, "--params", `{"a":"1","b":"2"}`, "--steps", "-1"}, "--steps must be >= 0"},
		{"no reference", []string{noRef, "--params", `{"n":3}`},
			noRef + " has no reference answer: the simulated model cannot answer it (add reference, or run it against a real model with maker run --task-file)"},
		{"reference null for these params", []string{classify, "--params", `{"choices":["a","b"],"records":["x"]}`},
			classify + ": its reference gives no answer (null) for these params: the simulated model cannot answer it"},
		{"invalid spec", []string{invalid, "--params", `{"n":3}`}, invalid + ": spec: invalid task spec: 1 problem(s):\n  done (line 21, column 1): gives int, want bool"},
		{"built-in name", []string{builtinName, "--params", `{"n":3}`}, builtinName + `: name: "hanoi" is a built-in task's name`},
		{"no such file", []string{missing, "--params", `{"n":3}`}, "task spec: open " + missing + ": no such file or directory"},
		{"sim accuracy 0", []string{multiply, "--params", `{"a":"1","b":"2"}`, "--sim-accuracy", "0"}, "--sim-accuracy 0 must be in (0, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			refused(t, runMain(t, append([]string{"task", "test"}, tc.args...)...), tc.want)
		})
	}
}

// fleetServer is a NATS server with a client on it, for the commands that
// talk to a fleet.
type fleetServer struct {
	url string
	js  jetstream.JetStream
}

func startFleetServer(t *testing.T) fleetServer {
	t.Helper()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	return fleetServer{srv.URL, js}
}

// maker runs a command against the server.
func (s fleetServer) maker(t *testing.T, args ...string) outcome {
	t.Helper()
	return runMain(t, append(args, "--nats", s.url)...)
}

// streams lists the server's streams (a KV bucket is stream KV_<bucket>).
func (s fleetServer) streams(t *testing.T) []string {
	t.Helper()
	var names []string
	l := s.js.StreamNames(t.Context())
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// jobMessages is the number of messages in the job stream; -1 when there
// is none.
func (s fleetServer) jobMessages(t *testing.T) int64 {
	t.Helper()
	st, err := s.js.Stream(t.Context(), bus.DefaultNamespace.JobsStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return int64(info.State.Msgs)
}

// registered lists the registry's records as task list --json shows them
// (built-ins left out).
func (s fleetServer) registered(t *testing.T) []string {
	t.Helper()
	res := s.maker(t, "task", "list", "--json")
	var rows []struct {
		Name, Version, Hash string
		Builtin             bool
	}
	if err := json.Unmarshal([]byte(res.stdout), &rows); err != nil || res.code != ExitOK {
		t.Fatalf("task list --json: exit %d, %v: %q, stderr %q", res.code, err, res.stdout, res.stderr)
	}
	var out []string
	for _, r := range rows {
		if !r.Builtin {
			out = append(out, r.Name+"@"+r.Version+" "+r.Hash)
		}
	}
	return out
}

// TestTaskReadCommandsCreateNothing: task list and task show, run against
// a NATS server without a fleet, say so and leave no stream or bucket;
// task register refuses an invalid spec before it connects.
func TestTaskReadCommandsCreateNothing(t *testing.T) {
	t.Parallel()
	s := startFleetServer(t)
	const noFleet = "no makerfleet topology on this server (namespace maker)"
	for _, args := range [][]string{
		{"task", "list"}, {"task", "list", "--json"}, {"task", "show", "multiply"}, {"task", "show", "multiply@1.0.0", "--json"},
	} {
		res := s.maker(t, args...)
		if res.code != ExitError || res.stdout != "" || !strings.HasPrefix(res.stderr, "maker: "+s.url+": "+noFleet) {
			t.Errorf("maker %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(args, " "), res.code, res.stdout, res.stderr, ExitError, noFleet)
		}
	}
	invalid := writeFile(t, "bad.yaml", edit(t, counterSpec, "done: state.count == params.n", "done: state.count + 1"))
	refused(t, s.maker(t, "task", "register", invalid), "gives int, want bool")
	builtinName := writeFile(t, "hanoi.yaml", edit(t, counterSpec, "name: counter", "name: hanoi"))
	refused(t, s.maker(t, "task", "register", builtinName), `"hanoi" is a built-in task's name`)
	if made := s.streams(t); len(made) > 0 {
		t.Errorf("the commands created %v", made)
	}
}

// TestTaskRegistry: register, list and show against a real NATS server.
// A name@version is immutable: the same spec again changes nothing,
// another spec under it is refused and the first stays; invalid specs and
// built-in names are refused and nothing is stored; show prints a spec as
// registered, by name (the latest version) or name@version.
func TestTaskRegistry(t *testing.T) {
	t.Parallel()
	s := startFleetServer(t)
	multiply := example("multiply.yaml")
	multiplySrc := readFile(t, multiply)
	multiplyHash := spec.Hash([]byte(multiplySrc))

	res := s.maker(t, "task", "register", multiply, "--by", "alice")
	if want := "multiply@1.0.0 registered (" + multiplyHash + ")\n"; res.code != ExitOK || res.stdout != want || res.stderr != "" {
		t.Fatalf("register: exit %d, stdout %q, stderr %q; want %q", res.code, res.stdout, res.stderr, want)
	}
	res = s.maker(t, "task", "register", multiply, "--by", "bob")
	if want := "multiply@1.0.0 already registered (the same spec): nothing changed (" + multiplyHash + ")\n"; res.code != ExitOK || res.stdout != want {
		t.Errorf("register again: exit %d, stdout %q, stderr %q; want %q", res.code, res.stdout, res.stderr, want)
	}
	res = s.maker(t, "task", "register", multiply, "--json")
	var reg struct {
		Name, Version, Hash string
		Created             *bool
	}
	if err := json.Unmarshal([]byte(res.stdout), &reg); err != nil || res.code != ExitOK ||
		reg.Name != "multiply" || reg.Version != "1.0.0" || reg.Hash != multiplyHash || reg.Created == nil || *reg.Created {
		t.Errorf("register again --json: exit %d, %v, %q; want created false", res.code, err, res.stdout)
	}

	// Another spec under a taken name@version: refused, naming both.
	changedSrc := "# changed\n" + multiplySrc
	changed := writeFile(t, "multiply.yaml", changedSrc)
	refused(t, s.maker(t, "task", "register", changed),
		"multiply@1.0.0 is registered as "+multiplyHash+", this spec is "+spec.Hash([]byte(changedSrc))+"; give it a new version")
	refused(t, s.maker(t, "task", "register", changed, "--json"), "name@version taken by another spec")

	// Invalid specs and built-in names: refused, nothing stored.
	invalid := writeFile(t, "bad.yaml", edit(t, counterSpec,
		"done: state.count == params.n", "done: state.count + 1", "max_steps: params.n", "max_steps: param.n"))
	res = s.maker(t, "task", "register", invalid)
	refused(t, res, invalid+": spec: invalid task spec: 2 problem(s):\n  max_steps (line 9, column 12): ")
	if !strings.Contains(res.stderr, "\n  done (line 21, column 1): gives int, want bool") {
		t.Errorf("stderr %q lacks the second problem", res.stderr)
	}
	refused(t, s.maker(t, "task", "register", writeFile(t, "hanoi.yaml", edit(t, counterSpec, "name: counter", "name: hanoi"))),
		`"hanoi" is a built-in task's name; give the spec another name`)
	refused(t, s.maker(t, "task", "register", filepath.Join(t.TempDir(), "nope.yaml")), "no such file or directory")
	if got, want := s.registered(t), []string{"multiply@1.0.0 " + multiplyHash}; !slices.Equal(got, want) {
		t.Errorf("registry holds %v, want only %v", got, want)
	}

	// Two versions of another spec.
	v1 := writeFile(t, "counter.yaml", counterSpec)
	v2Src := edit(t, counterSpec, "version: 1.0.0", "version: 1.1.0")
	v2 := writeFile(t, "counter.yaml", v2Src)
	for _, f := range []string{v1, v2} {
		if res := s.maker(t, "task", "register", f, "--by", "carol"); res.code != ExitOK || !strings.Contains(res.stdout, " registered (") {
			t.Fatalf("register %s: exit %d, stdout %q, stderr %q", f, res.code, res.stdout, res.stderr)
		}
	}
	counterHash, v2Hash := spec.Hash([]byte(counterSpec)), spec.Hash([]byte(v2Src))
	if got, want := s.registered(t), []string{
		"counter@1.0.0 " + counterHash, "counter@1.1.0 " + v2Hash, "multiply@1.0.0 " + multiplyHash,
	}; !slices.Equal(got, want) {
		t.Errorf("registry holds %v, want %v", got, want)
	}

	// list: the built-ins first, then every registered version.
	res = s.maker(t, "task", "list")
	got := lines(res.stdout)
	want := []string{
		"NAME      VERSION     HASH                 REGISTERED",
		"hanoi     (built in)",
		"counter   1.0.0       " + counterHash[:19] + "  ",
		"counter   1.1.0       " + v2Hash[:19] + "  ",
		"multiply  1.0.0       " + multiplyHash[:19] + "  ",
	}
	ok := res.code == ExitOK && len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok || !strings.HasSuffix(got[2], " by carol") || !strings.HasSuffix(got[4], " by alice") {
		t.Errorf("task list: exit %d, stdout:\n%s\nwant rows starting\n%s", res.code, res.stdout, strings.Join(want, "\n"))
	}
	res = s.maker(t, "task", "list", "--json")
	var rows []struct {
		Name, Version, Hash, By string
		Builtin                 bool
		RegisteredAt            string `json:"registered_at"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &rows); err != nil || res.code != ExitOK || len(rows) != 4 {
		t.Fatalf("task list --json: exit %d, %v: %s", res.code, err, res.stdout)
	}
	if r := rows[0]; r.Name != "hanoi" || !r.Builtin || r.Version != "" || r.RegisteredAt != "" {
		t.Errorf("task list --json: first row %+v, want the built-in hanoi", r)
	}
	if r := rows[3]; r.Name != "multiply" || r.Builtin || r.Version != "1.0.0" || r.Hash != multiplyHash || r.By != "alice" || r.RegisteredAt == "" {
		t.Errorf("task list --json: last row %+v, want multiply@1.0.0 by alice", r)
	}

	// show: the source as registered; the latest version without one.
	for _, tc := range []struct {
		ref, src, header string
	}{
		{"multiply", multiplySrc, "# multiply@1.0.0  " + multiplyHash + "  registered "},
		{"multiply@1.0.0", multiplySrc, "# multiply@1.0.0  " + multiplyHash + "  registered "},
		{"counter", v2Src, "# counter@1.1.0  " + v2Hash + "  registered "},
		{"counter@1.0.0", counterSpec, "# counter@1.0.0  " + counterHash + "  registered "},
	} {
		res := s.maker(t, "task", "show", tc.ref)
		if res.code != ExitOK || res.stdout != tc.src || !strings.HasPrefix(res.stderr, tc.header) || !strings.HasSuffix(res.stderr, " by carol\n") && !strings.HasSuffix(res.stderr, " by alice\n") {
			t.Errorf("show %s: exit %d, stderr %q, stdout:\n%s\nwant the source as registered, and %q on stderr", tc.ref, res.code, res.stderr, res.stdout, tc.header)
		}
		res = s.maker(t, "task", "show", tc.ref, "--json")
		var rec schemas.TaskRecord
		if err := json.Unmarshal([]byte(res.stdout), &rec); err != nil || res.code != ExitOK || rec.Source != tc.src || rec.Hash != spec.Hash([]byte(tc.src)) {
			t.Errorf("show %s --json: exit %d, %v: %s", tc.ref, res.code, err, res.stdout)
		}
	}

	// show of what is not there: an unknown task or version fails (as
	// status of an unknown job does); a malformed reference or a
	// built-in's name is refused as bad input.
	for _, tc := range []struct {
		ref  string
		code int
		want string
	}{
		{"nope", ExitError, "maker: taskreg: unknown task: nope\n"},
		{"multiply@9.9.9", ExitError, "maker: taskreg: unknown task: multiply@9.9.9\n"},
		{"hanoi@1.0.0", ExitError, "maker: taskreg: unknown task: hanoi@1.0.0\n"},
		{"hanoi", ExitUsage, `maker: "hanoi" is a built-in task, written in Go (package task/hanoi), not a spec` + "\n"},
		{"multiply@bad version", ExitUsage, `maker: task: unknown task: "multiply@bad version" is not NAME or NAME@VERSION`},
		{"@1.0.0", ExitUsage, `maker: task: unknown task: "@1.0.0" is not NAME or NAME@VERSION`},
	} {
		res := s.maker(t, "task", "show", tc.ref)
		if res.code != tc.code || res.stdout != "" || !strings.HasPrefix(res.stderr, tc.want) {
			t.Errorf("show %s: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.ref, res.code, res.stdout, res.stderr, tc.code, tc.want)
		}
	}
}

// TestSubmitTaskSpec: submit --task looks a spec up in the fleet's
// registry. An unknown task or version, params the spec refuses, or params
// that are not JSON are refused before anything is sent: the job stream
// stays empty (and is not even made on a server without a fleet). A
// valid submit enqueues one job pinning the spec's version and hash.
func TestSubmitTaskSpec(t *testing.T) {
	t.Parallel()
	s := startFleetServer(t)

	// No fleet on the server: no spec is registered, and nothing is made.
	refused(t, s.maker(t, "submit", "--task", "multiply", "--params", `{"a":"1","b":"2"}`, "--k", "1"),
		`task: unknown task "multiply" (built in: [hanoi]; register a spec with maker task register)`)
	if made := s.streams(t); len(made) > 0 {
		t.Errorf("a refused submit created %v", made)
	}

	multiply := example("multiply.yaml")
	if res := s.maker(t, "task", "register", multiply); res.code != ExitOK {
		t.Fatalf("register: exit %d, stderr %q", res.code, res.stderr)
	}
	missing := filepath.Join(t.TempDir(), "nope.json")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown task", []string{"--task", "nope", "--params", "{}"}, `unknown task "nope" (built in: [hanoi]; register a spec with maker task register)`},
		{"unknown task without params", []string{"--task", "nope"}, `unknown task "nope"`},
		{"unknown version", []string{"--task", "multiply@9.9.9", "--params", `{"a":"1","b":"2"}`}, `unknown task "multiply@9.9.9"`},
		{"malformed version", []string{"--task", "multiply@bad version", "--params", `{"a":"1","b":"2"}`}, `"multiply@bad version" is not NAME or NAME@VERSION`},
		{"params fail the schema", []string{"--task", "multiply", "--params", `{"a":"x"}`},
			"task: invalid params: multiply params: /: missing property 'b'; /a: 'x' does not match pattern '^[0-9]{1,1000}$'"},
		{"params with an unknown field", []string{"--task", "multiply@1.0.0", "--params", `{"a":"1","b":"2","c":"3"}`}, "invalid params: multiply params: "},
		{"params not JSON", []string{"--task", "multiply", "--params", `{"a":`}, `--params is not valid JSON: {"a":`},
		{"params file missing", []string{"--task", "multiply", "--params", "@" + missing}, "no such file or directory"},
		{"no params", []string{"--task", "multiply"}, `--params is required for task "multiply@1.0.0"`},
		{"k 0", []string{"--task", "multiply", "--params", `{"a":"1","b":"2"}`, "--k", "0"}, "k must be >= 1"},
	} {
		refused(t, s.maker(t, append([]string{"submit"}, tc.args...)...), tc.want)
		if n := s.jobMessages(t); n != 0 {
			t.Errorf("%s: the job stream holds %d messages after a refused submit, want 0", tc.name, n)
		}
	}

	res := s.maker(t, "submit", "--task", "multiply", "--params", `{"a":"12","b":"34"}`, "--k", "2", "--job-id", "m1")
	if res.code != ExitOK || res.stdout != "m1\n" {
		t.Fatalf("submit: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if n := s.jobMessages(t); n != 1 {
		t.Errorf("the job stream holds %d messages after one submit, want 1", n)
	}
	topo, err := topology.Open(t.Context(), s.js, topology.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := jobs.Get(t.Context(), topo, schemas.DefaultTenant, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if sp := rec.Spec; sp.Task != "multiply" || sp.TaskVersion != "1.0.0" || sp.TaskHash != spec.Hash([]byte(readFile(t, multiply))) ||
		string(sp.Params) != `{"a":"12","b":"34"}` || sp.K != 2 {
		t.Errorf("the job pins %s@%s %s params %s k=%d; want multiply@1.0.0, its hash, the params and k=2",
			sp.Task, sp.TaskVersion, sp.TaskHash, sp.Params, sp.K)
	}
}

// TestRunTaskFile: run --task-file runs each example spec on an
// in-process fleet to a solved report whose final state is the task's
// answer.
func TestRunTaskFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file, params string
		task         string
		steps        int64
		final        string
	}{
		// 12 × 34 = 408, least significant digit first.
		{"multiply.yaml", `{"a":"12","b":"34"}`, "multiply", 6, `{"acc":[8,0,4,0],"carry":0,"i":2,"j":0}`},
		{"ledger.yaml", "@" + example("ledger.params.json"), "ledger", 10,
			`{"balances":{"alice":6501,"bob":3701,"carol":2899,"dave":99},"n":10}`},
		{"classify.yaml", "@" + example("classify.params.json"), "classify", 6,
			`{"labels":["positive","negative","neutral","positive","negative","neutral"],"n":6}`},
		{"hanoi.yaml", `{"disks":3}`, "hanoi-spec", 7, `{"pegs":[[],[],[3,2,1]],"prev":[1,0,2]}`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			res := runMain(t, "run", "-q", "--json", "--task-file", example(tc.file), "--params", tc.params)
			var rep schemas.JobReport
			if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.code != ExitOK {
				t.Fatalf("exit %d, %v: %q, stderr %q", res.code, err, res.stdout, res.stderr)
			}
			if rep.State != schemas.StateSolved || !rep.Solved || rep.Task != tc.task || rep.TaskVersion != "1.0.0" ||
				rep.Steps != tc.steps || rep.TotalSteps != tc.steps || rep.Errors != 0 || compact(t, rep.FinalState) != tc.final {
				t.Errorf("report: %s %s@%s steps %d/%d, %d wrong, final state %s; want solved %s in %d steps, final state %s",
					rep.State, rep.Task, rep.TaskVersion, rep.Steps, rep.TotalSteps, rep.Errors, rep.FinalState, tc.task, tc.steps, tc.final)
			}
		})
	}
}

// TestRunTaskFileHanoiIsBuiltin: the hanoi example spec runs the job the
// built-in hanoi runs: the same trace for the same seed.
func TestRunTaskFileHanoiIsBuiltin(t *testing.T) {
	t.Parallel()
	runs := map[string][]string{
		"spec":     {"--task-file", example("hanoi.yaml"), "--params", `{"disks":5}`},
		"built-in": {"--disks", "5"},
	}
	traces := map[string]string{}
	var mu sync.Mutex
	t.Run("runs", func(t *testing.T) { // returns when both have run
		for name, args := range runs {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				res := runMain(t, append([]string{"run", "-q", "--json", "--seed", "3"}, args...)...)
				var rep schemas.JobReport
				if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.code != ExitOK || rep.State != schemas.StateSolved || rep.TraceSHA256 == "" {
					t.Fatalf("maker run %v: exit %d, %v: %q, stderr %q", args, res.code, err, res.stdout, res.stderr)
				}
				mu.Lock()
				traces[name] = rep.TraceSHA256
				mu.Unlock()
			})
		}
	})
	if !t.Failed() && traces["spec"] != traces["built-in"] {
		t.Errorf("trace_sha256 of the spec's job %q, of the built-in's %q; want the same", traces["spec"], traces["built-in"])
	}
}

// TestRunTaskFileRefused: run --task-file refuses, before it starts a
// fleet, a spec or params it cannot run.
func TestRunTaskFileRefused(t *testing.T) {
	t.Parallel()
	multiply := example("multiply.yaml")
	builtinName := writeFile(t, "hanoi.yaml", edit(t, counterSpec, "name: counter", "name: hanoi"))
	invalid := writeFile(t, "bad.yaml", edit(t, counterSpec, "done: state.count == params.n", "done: state.count + 1"))
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"task and task-file", []string{"--task", "hanoi", "--task-file", multiply, "--params", `{"a":"1","b":"2"}`}, "give --task or --task-file, not both"},
		{"params fail the schema", []string{"--task-file", multiply, "--params", `{"a":"1"}`}, "invalid params: multiply params: /: missing property 'b'"},
		{"params not JSON", []string{"--task-file", multiply, "--params", "a=1"}, "--params is not valid JSON: a=1"},
		{"no params", []string{"--task-file", multiply}, `--params is required for task "multiply@1.0.0"`},
		{"invalid spec", []string{"--task-file", invalid, "--params", `{"n":3}`}, "done (line 21, column 1): gives int, want bool"},
		{"built-in name", []string{"--task-file", builtinName, "--params", `{"n":3}`}, `"hanoi" is a built-in task's name`},
		{"no such file", []string{"--task-file", missing, "--params", `{"n":3}`}, "task spec: open " + missing + ": no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			refused(t, runMain(t, append([]string{"run", "-q"}, tc.args...)...), tc.want)
		})
	}
}
