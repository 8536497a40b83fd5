package spec_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/spec"
)

// counter is a small valid spec the bad-input cases start from: count from
// 0 to params.n, one step each, the answer a JSON object.
const counter = `name: counter
version: "1"
params:
  type: object
  properties: {n: {type: integer, minimum: 1, maximum: 1000}}
  required: [n]
initial: '{"i": 0}'
max_steps: params.n
prompt:
  user: 'You are at {{.state.i}}. Say {"next": {"i": <one more>}}.'
answer:
  format: json
  schema:
    type: object
    properties: {next: {type: object, properties: {i: {type: integer}}, required: [i]}}
    required: [next]
next: {field: next}
done: state.i == params.n
reference: '{"next": {"i": state.i + 1}}'
`

func compile(t *testing.T, src string) *spec.Task {
	t.Helper()
	tk, err := spec.Compile([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestCompileRefusesBadSpecs: every kind of invalid spec is refused with
// every problem named by its path and, where the file has one, its line.
func TestCompileRefusesBadSpecs(t *testing.T) {
	cases := []struct {
		name string
		edit func(string) string
		want []string // each must appear in the error
	}{
		{"not YAML", func(string) string { return "name: [x\n  y: :" }, []string{"not valid YAML or JSON", "line"}},
		{"missing fields", func(string) string { return "name: x\nversion: '1'\n" },
			[]string{"initial (line 1, column 1): missing (required)", "prompt (line 1, column 1): missing (required)"}},
		{"unknown field", func(s string) string { return s + "colour: blue\n" }, []string{"colour (line 20, column 1): unknown field"}},
		{"bad name", func(s string) string { return strings.Replace(s, "name: counter", "name: Counter!", 1) }, []string{"name (line 1, column 1)", "does not match pattern"}},
		{"wrong type", func(s string) string { return strings.Replace(s, "max_steps: params.n", "max_steps: [1]", 1) },
			[]string{"max_steps (line 8"}},
		{"CEL syntax", func(s string) string { return strings.Replace(s, "done: state.i == params.n", "done: state.i ==", 1) },
			[]string{"done (line 18, column 17): CEL: Syntax error"}},
		{"CEL error in a folded block", func(s string) string {
			return strings.Replace(s, "done: state.i == params.n", "done: >-\n  state.i ==\n    params.n &&\n  stat.i > 0", 1)
		}, []string{"done (line 21, column 3): CEL: undeclared reference to 'stat'"}},
		{"CEL error in a literal block", func(s string) string {
			return strings.Replace(s, "done: state.i == params.n", "done: |-\n  state.i == params.n\n    && nope", 1)
		}, []string{"done (line 20, column 8): CEL: undeclared reference to 'nope'"}},
		{"a red flag reads a field the answer does not have", func(s string) string {
			return strings.Replace(s, "    required: [next]\nnext: {field: next}",
				"    required: [next]\n    additionalProperties: false\nnext: {field: next}\nred_flags:\n  - name: typo\n    when: answer.nxt == null", 1)
		}, []string{"red_flags[0].when", "reads answer.nxt, which the answer does not have (its fields: [next])"}},
		{"next reads a field left out of vote", func(s string) string {
			return strings.Replace(s, "next: {field: next}", "vote: [next]\nnext: {expr: 'answer.note'}", 1)
		}, []string{"next.expr (line 18", "reads answer.note, which is not a vote field"}},
		{"CEL type", func(s string) string { return strings.Replace(s, "done: state.i == params.n", "done: '1 + 2'", 1) },
			[]string{"done", "gives int, want bool"}},
		{"variable not available", func(s string) string {
			return strings.Replace(s, `initial: '{"i": 0}'`, `initial: '{"i": state.i}'`, 1)
		},
			[]string{"initial", `"state" is not available here`}},
		{"cost limit", func(s string) string {
			return strings.Replace(s, "done: state.i == params.n", "done: lists.range(1000000000).map(i, i * i).size() == 0", 1)
		}, []string{"done", "cost limit exceeded"}},
		{"template", func(s string) string { return strings.Replace(s, "{{.state.i}}", "{{.state.i", 1) },
			[]string{"prompt.user (line 10", "template"}},
		{"regex", func(s string) string {
			return strings.Replace(s, "format: json", "format: regex\n  regex: '(?P<next>[0-9+'\n  render: x", 1)
		}, []string{"answer.regex", "not a valid regular expression"}},
		{"regex without a render template", func(s string) string {
			return strings.Replace(s, "format: json", "format: regex\n  regex: '(?P<next>[0-9]+)'", 1)
		}, []string{"answer.render", "needs a render template"}},
		{"next field unknown", func(s string) string { return strings.Replace(s, "next: {field: next}", "next: {field: nxt}", 1) },
			[]string{"next.field", `"nxt" is not a field of the answer`}},
		{"next both", func(s string) string {
			return strings.Replace(s, "next: {field: next}", "next: {field: next, expr: state}", 1)
		},
			[]string{"next", "not both"}},
		{"answer schema not a schema", func(s string) string {
			return strings.Replace(s, "    required: [next]\nnext:", "    required: 7\nnext:", 1)
		}, []string{"answer.schema", "not a JSON Schema"}},
		{"schema fetches", func(s string) string {
			return strings.Replace(s, "  required: [n]\n", "  required: [n]\n  $ref: 'https://example.com/x.json'\n", 1)
		}, []string{"params", "may not refer to other documents"}},
		{"red flag twice", func(s string) string {
			return s + "red_flags:\n  - {name: big, when: answer.next.i > 10}\n  - {name: big, when: answer.next.i > 20}\n"
		}, []string{"red_flags[1].name", "given twice"}},
		{"alias", func(s string) string { return s + "description: &d x\nreference2: *d\n" }, []string{"aliases"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := spec.Compile([]byte(tc.edit(counter)))
			if !errors.Is(err, spec.ErrInvalid) {
				t.Fatalf("err %v, want ErrInvalid", err)
			}
			var probs spec.Errors
			if !errors.As(err, &probs) || len(probs) == 0 {
				t.Fatalf("err %T has no problem list", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestCompileReportsEveryProblem: two unrelated mistakes are both named.
func TestCompileReportsEveryProblem(t *testing.T) {
	src := strings.Replace(counter, "done: state.i == params.n", "done: state.i +", 1)
	src = strings.Replace(src, "{{.state.i}}", "{{.state.i", 1)
	_, err := spec.Compile([]byte(src))
	var probs spec.Errors
	if !errors.As(err, &probs) || len(probs) != 2 {
		t.Fatalf("problems %v, want the template and the expression", err)
	}
}

// TestRunningFailuresAreErrors: an expression or template that fails for
// one state is an error wrapping task.ErrEval (never a panic or a hang);
// params the schema refuses are ErrInvalidParams naming the path.
func TestRunningFailuresAreErrors(t *testing.T) {
	tk := compile(t, strings.Replace(counter, "done: state.i == params.n", "done: state.i == [1, 2][state.i]", 1))
	in, err := tk.Bind(json.RawMessage(`{"n": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.(*spec.Instance).DoneErr(json.RawMessage(`{"i": 5}`)); !errors.Is(err, task.ErrEval) || !strings.Contains(err.Error(), "done") {
		t.Errorf("index out of range: %v, want ErrEval naming done", err)
	}
	if in.Done(json.RawMessage(`{"i": 5}`)) {
		t.Error("a state done cannot judge is the goal")
	}
	// A runaway expression stops at the cost limit.
	tk = compile(t, strings.Replace(counter, "done: state.i == params.n",
		"done: lists.range(params.n).map(a, lists.range(params.n).map(b, a * b)).size() == 0", 1))
	in, err = tk.Bind(json.RawMessage(`{"n": 1000}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.(*spec.Instance).DoneErr(in.Initial()); !errors.Is(err, task.ErrEval) || !strings.Contains(err.Error(), "cost") && !strings.Contains(err.Error(), "longer than") {
		t.Errorf("runaway: %v, want ErrEval (over the cost limit, or its time)", err)
	}
	// A template that fails for a state.
	tk = compile(t, strings.Replace(counter, "{{.state.i}}", "{{.state.j}}", 1))
	in, _ = tk.Bind(json.RawMessage(`{"n": 3}`))
	if _, err := in.Prompt(in.Initial()); !errors.Is(err, task.ErrEval) || !strings.Contains(err.Error(), "prompt.user") {
		t.Errorf("template: %v, want ErrEval naming prompt.user", err)
	}
	// Params.
	if _, err := tk.Bind(json.RawMessage(`{"n": 0}`)); !errors.Is(err, task.ErrInvalidParams) || !strings.Contains(err.Error(), "/n") {
		t.Errorf("params n=0: %v, want ErrInvalidParams at /n", err)
	}
	if _, err := tk.Bind(json.RawMessage(`[1]`)); !errors.Is(err, task.ErrInvalidParams) {
		t.Errorf("params [1]: %v", err)
	}
}

// TestParseAndNext: the JSON reader takes the reply's last object, the
// schema and red flags judge it, the vote key is canonical, and Next
// refuses any other spelling.
func TestParseAndNext(t *testing.T) {
	tk := compile(t, counter+"red_flags:\n  - {name: skipped, when: answer.next.i != state.i + 1}\n")
	in, err := tk.Bind(json.RawMessage(`{"n": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	st := in.Initial()
	cases := []struct {
		reply, key, flag string
	}{
		{`Sure. {"next": {"i": 1}}`, `{"next":{"i":1}}`, ""},
		{`{"next": {"i": 9}} no, wait: { "next" : { "i" : 1 } } done`, `{"next":{"i":1}}`, ""},
		{`{"next": {"i": "1"}}`, "", "parse"},
		{`{"next": {"i": 2}}`, "", "skipped"},
		{`no json`, "", "parse"},
		{`{"nxt": 1}`, "", "parse"},
	}
	for _, c := range cases {
		v, err := in.Parse(st, c.reply)
		var rf *task.RedFlag
		switch {
		case c.flag == "" && (err != nil || v.Key != c.key):
			t.Errorf("%q: %v %v, want %s", c.reply, v, err, c.key)
		case c.flag == "parse" && (!errors.Is(err, task.ErrMalformed) || errors.As(err, &rf)):
			t.Errorf("%q: %v, want a parse red flag", c.reply, err)
		case c.flag != "" && c.flag != "parse" && (!errors.As(err, &rf) || rf.Reason != c.flag):
			t.Errorf("%q: %v, want red flag %s", c.reply, err, c.flag)
		}
	}
	next, err := in.Next(st, task.Vote{Key: `{"next":{"i":1}}`})
	if err != nil || string(next) != `{"i":1}` {
		t.Errorf("next %s %v", next, err)
	}
	for _, bad := range []string{`{"next": {"i": 1}}`, `[]`, `{"next":{"i":"1"}}`} {
		if _, err := in.Next(st, task.Vote{Key: bad}); !errors.Is(err, task.ErrMalformed) {
			t.Errorf("Next(%s): %v, want ErrMalformed", bad, err)
		}
	}
}

// TestBindShares: the same params give the one instance (the roles of an
// in-process fleet share its caches); other params another; bad params the
// same error every time.
func TestBindShares(t *testing.T) {
	tk := compile(t, counter)
	a, err := tk.Bind(json.RawMessage(`{"n": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := tk.Bind(json.RawMessage(`{"n": 3}`))
	c, _ := tk.Bind(json.RawMessage(`{"n": 4}`))
	if a != b || a == c {
		t.Fatalf("same params shared %v, other params separate %v", a == b, a != c)
	}
	for range 2 {
		if _, err := tk.Bind(json.RawMessage(`{"n": 0}`)); !errors.Is(err, task.ErrInvalidParams) {
			t.Fatalf("n=0: %v, want ErrInvalidParams", err)
		}
	}
}

// TestPromptIsTheCallers: a cached prompt is handed out as a copy, so one
// caller changing it does not change another's.
func TestPromptIsTheCallers(t *testing.T) {
	in, err := compile(t, counter).Bind(json.RawMessage(`{"n": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	p1, err := in.Prompt(in.Initial())
	if err != nil {
		t.Fatal(err)
	}
	want := p1[0].Content
	p1[0].Content = "changed"
	p2, _ := in.Prompt(in.Initial())
	if p2[0].Content != want {
		t.Fatalf("second prompt %q, want %q", p2[0].Content, want)
	}
}
