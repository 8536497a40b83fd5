package spec

import (
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/plainjson"
)

// TestAuthorFunctions: the functions a spec author reaches for give what
// they promise, fail with a clear error on bad input, and stay within
// the cost limit on long lists (unique of 100,000 items).
func TestAuthorFunctions(t *testing.T) {
	t.Parallel()
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	d := &doc{pos: map[string][2]int{}, strs: map[string]strPos{}}
	big := make([]any, 100_000)
	for i := range big {
		big[i] = int64(i % 1000)
	}
	params := map[string]any{"name": "Đorđević", "big": big, "nums": []any{int64(1), int64(2), 3.5}}
	for _, tc := range []struct {
		src, want, err string
	}{
		{src: `params.name.upper()`, want: `"ĐORĐEVIĆ"`},
		{src: `"ĐORĐEVIĆ".lower()`, want: `"đorđević"`},
		{src: `"Straße".upper()`, want: `"STRASSE"`},
		{src: `"e\u0301".normalize("NFC") == "\u00e9"`, want: `true`},
		{src: `"ﬁ".normalize("NFKC")`, want: `"fi"`},
		{src: `"x".normalize("NFX")`, err: `normalize: form "NFX" is not NFC, NFD, NFKC or NFKD`},
		{src: `"a-1 b-22".replaceRegex("([a-z])-([0-9]+)", "$2$1")`, want: `"1a 22b"`},
		{src: `"abc".replaceRegex("(", "")`, err: "replaceRegex: error parsing regexp"},
		{src: `[1, 2, 3].sum()`, want: `6`},
		{src: `params.nums.sum()`, want: `6.5`},
		{src: `[].sum()`, want: `0`},
		{src: `[9223372036854775807, 1].sum()`, err: "sum: int overflow"},
		{src: `[1, "two"].sum()`, err: "sum: item 1 is a string, not a number"},
		{src: `[3, 1, 3, 2, 1.0].unique()`, want: `[3,1,2]`},
		{src: `[{"a": 1}, {"a": 1}, {"a": 2}].unique()`, want: `[{"a":1},{"a":2}]`},
		{src: `params.big.unique().size()`, want: `1000`},
		{src: `[1, 2, 3].fold(x, acc, 10, acc + x)`, want: `16`},
		{src: `["a", "b"].fold(s, out, "", out + s.upper())`, want: `"AB"`},
		// CEL's own distinct compares every pair: over the cost limit or
		// the time limit, whichever comes first.
		{src: `params.big.distinct().size()`, err: "(params.big.distinct().size())"},
	} {
		t.Run(tc.src, func(t *testing.T) {
			t.Parallel()
			e, probs := compileExpr(env, d, "x", tc.src, []string{varParams}, "")
			if len(probs) > 0 {
				t.Fatalf("compile: %v", probs)
			}
			v, err := e.eval("x", map[string]any{varParams: params})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := plainjson.Marshal(v); string(got) != tc.want {
				t.Errorf("gave %s, want %s", got, tc.want)
			}
		})
	}
	if _, probs := compileExpr(env, d, "x", `[1].fold(x, x, 0, x)`, []string{varParams}, ""); len(probs) == 0 || !strings.Contains(probs[0].Msg, "both") {
		t.Errorf("fold with one name for both: %v", probs)
	}
}

// TestLet: a let is shared by the expressions that see what it reads: a
// reference and a wrong generator share one helper; a let reading state
// is refused where there is no state; a let may use the lets before it,
// not after; names are checked; a let that fails names itself.
func TestLet(t *testing.T) {
	t.Parallel()
	const base = `name: lets
version: 1.0.0
params:
  type: object
  properties:
    words: {type: array, items: {type: string}}
let:
  - name: n
    expr: params.words.size()
  - name: right
    expr: 'params.words[state.i].upper()'
initial: '{"i": 0}'
max_steps: n
prompt:
  user: 'Say {{index .params.words .state.i}} in capitals.'
answer:
  format: json
  schema: {type: object, properties: {w: {type: string}}, required: [w]}
next:
  expr: '{"i": state.i + 1}'
done: state.i == n
reference: '{"w": right}'
wrong: '[{"w": right.lower()}, {"w": right + "!"}]'
`
	tk, err := Compile([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	bound, err := tk.Bind([]byte(`{"words": ["straße", "đorđe"]}`))
	if err != nil {
		t.Fatal(err)
	}
	in := bound.(*Instance)
	if in.TotalSteps() != 2 {
		t.Errorf("max_steps through a let: %d, want 2", in.TotalSteps())
	}
	if n, err := in.DryRun(10); err != nil || n != 2 {
		t.Fatalf("dry run: %d steps, %v", n, err)
	}
	key, _, err := in.Reference(in.Initial())
	if err != nil || key != `{"w":"STRASSE"}` {
		t.Errorf("reference through a let: %s, %v", key, err)
	}
	wrong, err := in.Wrong(in.Initial())
	if err != nil || len(wrong) != 2 || wrong[0]["w"] != "strasse" {
		t.Errorf("wrong through a let: %v, %v", wrong, err)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"state where there is none", "max_steps: n", "max_steps: right.size()", `"right" (a let) reads what is not available here`},
		{"a later let", "    expr: params.words.size()", "    expr: right.size()", `"right" (a let) reads what is not available here, or comes later`},
		{"a variable's name", "  - name: n\n", "  - name: state\n", `"state" is a variable every expression has`},
		{"twice", "  - name: right", "  - name: n", `"n" given twice`},
		{"a bad name", "  - name: right", "  - name: Right", "let[1].name"},
	} {
		src := strings.Replace(base, tc.from, tc.to, 1)
		if src == base {
			t.Fatalf("%s: %q not in the spec", tc.name, tc.from)
		}
		if _, err := Compile([]byte(src)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// A let that fails fails the expression that reads it, naming the let.
	failing, err := Compile([]byte(strings.Replace(base, "'params.words[state.i].upper()'", "'params.words[state.i + 5].upper()'", 1)))
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := failing.Bind([]byte(`{"words": ["a"]}`))
	if _, _, err := b2.(*Instance).Reference(b2.Initial()); err == nil || !strings.Contains(err.Error(), "let right") {
		t.Errorf("a failing let: %v, want it named", err)
	}
}
