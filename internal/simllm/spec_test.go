package simllm

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	"github.com/makerfleet/makerfleet/task/spec"
)

// Tests of the spec path: requests whose sim hints name a task spec are
// answered from the spec's reference answer.

// counterSpec adds (i+1)² to a running total each step. Its answers are
// read with a regex and written by a render template; its wrong expression
// lists, in order: total+1 (twice), the right answer, an answer the schema
// refuses, the total plus i+1 (the right one at step 0) and total-1. The
// model may give only the wrong answers that are votes, each once: at step
// 0 total+1 and total-1, later total+1, the total plus i+1 and total-1.
const counterSpec = `
name: sim-counter
version: 1.0.0
params:
  type: object
  properties:
    n: {type: integer, minimum: 1, maximum: 1000}
  required: [n]
  additionalProperties: false
initial: '{"i": 0, "total": 0}'
max_steps: params.n
prompt:
  system: Keep a running total. Each step adds the square of the step's number.
  user: |-
    Step {{add .state.i 1}}: the total is {{.state.total}}. Add {{add .state.i 1}} squared.
answer:
  format: regex
  regex: 'total = (?P<total>-?[0-9]+)'
  groups: {total: int}
  schema:
    type: object
    properties:
      total: {type: integer, minimum: 0}
    required: [total]
  render: |-
    Adding the square to the total.
    total = {{.answer.total}}
next:
  expr: '{"i": state.i + 1, "total": answer.total}'
done: state.i == params.n
reference: '{"total": state.total + (state.i + 1) * (state.i + 1)}'
wrong: >-
  cel.bind(r, state.total + (state.i + 1) * (state.i + 1),
  [{"total": r + 1}, {"total": r}, {"total": r + 1}, {"total": -1},
   {"total": state.total + state.i + 1}, {"total": r - 1}])
`

// counterWrong is the counter's wrong answers in the model's order: the
// wrong expression's votes, each once.
func counterWrong(i, total int) []string {
	r := total + (i+1)*(i+1)
	k := func(v int) string { return `{"total":` + strconv.Itoa(v) + `}` }
	if i == 0 {
		return []string{k(r + 1), k(r - 1)}
	}
	return []string{k(r + 1), k(total + i + 1), k(r - 1)}
}

// multiplyWrong is multiply.yaml's wrong answers in the model's order: the
// reference's carry, then digit, moved by +1, -1 and +2, where the answer
// schema (0-9) allows.
func multiplyWrong(ref map[string]any) []string {
	var out []string
	for _, f := range []string{"carry", "digit"} {
		for _, d := range []int64{1, -1, 2} {
			v := ref[f].(int64) + d
			if v < 0 || v > 9 {
				continue
			}
			a := map[string]int64{"carry": ref["carry"].(int64), "digit": ref["digit"].(int64)}
			a[f] = v
			out = append(out, fmt.Sprintf(`{"carry":%d,"digit":%d}`, a["carry"], a["digit"]))
		}
	}
	return out
}

func compileSpec(t *testing.T, src []byte) *spec.Task {
	t.Helper()
	tk, err := spec.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func exampleSpec(t *testing.T, file string) *spec.Task {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "tasks", file))
	if err != nil {
		t.Fatal(err)
	}
	return compileSpec(t, src)
}

// specSource is the task source maker simllm uses: the built-ins and the
// given specs, as if read with --task-file.
func specSource(tks ...*spec.Task) task.Source {
	reg := taskreg.New(nil, builtin.Registry(), spec.CompileSpec)
	for _, tk := range tks {
		reg.Add(tk)
	}
	return reg
}

// specRun is a spec bound to params, walked along its reference answers.
type specRun struct {
	tk     *spec.Task
	in     *spec.Instance
	states []task.State
	refs   []string         // the reference's vote key from each state
	answer []map[string]any // the reference answer from each state
}

func newSpecRun(t *testing.T, tk *spec.Task, params string) *specRun {
	t.Helper()
	bound, err := tk.Bind(json.RawMessage(params))
	if err != nil {
		t.Fatal(err)
	}
	r := &specRun{tk: tk, in: bound.(*spec.Instance)}
	for s := r.in.Initial(); !r.in.Done(s); {
		if int64(len(r.states)) >= r.in.TotalSteps() {
			t.Fatalf("not done after %d steps", len(r.states))
		}
		key, ans, err := r.in.Reference(s)
		if err != nil {
			t.Fatalf("step %d: %v", len(r.states), err)
		}
		r.states, r.refs, r.answer = append(r.states, s), append(r.refs, key), append(r.answer, ans)
		if s, err = r.in.Next(s, task.Vote{Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// hint is the sim hint a voter with --sim-hints sends for step i.
func (r *specRun) hint(i int) llm.SimHint {
	return llm.SimHint{Task: r.tk.Name(), Version: r.tk.Version(), Hash: r.tk.Hash(), Params: r.in.Params(), State: r.states[i]}
}

// headers turns a hint into name, value pairs for post.
func headers(h llm.SimHint) []string {
	var out []string
	for k, v := range h.Headers() {
		out = append(out, k, v)
	}
	return out
}

// body is a request for step i's prompt, plus extra fields.
func (r *specRun) body(t *testing.T, i int, extra map[string]any) string {
	t.Helper()
	msgs, err := r.in.Prompt(r.states[i])
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"model": "sim-1", "messages": msgs}
	for k, v := range extra {
		body[k] = v
	}
	return mustJSON(t, body)
}

// specTally classifies choices with the spec's own parser.
type specTally struct {
	correct, wrong, malformed, overlong int
	wrongKeys                           []string
}

func (ty *specTally) add(t *testing.T, r *specRun, i int, content, finish string) {
	t.Helper()
	if finish == "length" {
		ty.overlong++
		return
	}
	v, err := r.in.Parse(r.states[i], content)
	switch {
	case err != nil:
		ty.malformed++
	case v.Key == r.refs[i]:
		ty.correct++
	default:
		if err := r.in.Verify(r.states[i], v); !errors.Is(err, task.ErrWrongStep) {
			t.Errorf("step %d: Verify(%s) = %v, want ErrWrongStep", i, v.Key, err)
		}
		ty.wrong++
		ty.wrongKeys = append(ty.wrongKeys, v.Key)
	}
}

func (ty *specTally) merge(o specTally) {
	ty.correct += o.correct
	ty.wrong += o.wrong
	ty.malformed += o.malformed
	ty.overlong += o.overlong
	ty.wrongKeys = append(ty.wrongKeys, o.wrongKeys...)
}

// draw sends requests for step i with its hint, each with 16 choices and
// its own seed from seed0 on, at temperature 0.1.
func (r *specRun) draw(t *testing.T, srv *Server, i, requests, seed0 int) specTally {
	t.Helper()
	var ty specTally
	hdr := headers(r.hint(i))
	for k := range requests {
		resp := mustChat(t, srv, r.body(t, i, map[string]any{"seed": seed0 + k, "n": 16, "temperature": 0.1}), hdr...)
		for _, c := range resp.Choices {
			ty.add(t, r, i, c.Message.Content, c.FinishReason)
		}
	}
	return ty
}

// specRuns are the specs with references the tests answer: a render
// template with a regex answer and a wrong expression (counter), JSON
// answers whose wrong ones are alterations of the reference (multiply),
// and a wrong expression over labels (classify).
func specRuns(t *testing.T) []*specRun {
	t.Helper()
	labels, err := os.ReadFile(filepath.Join("..", "..", "examples", "tasks", "classify.params.json"))
	if err != nil {
		t.Fatal(err)
	}
	return []*specRun{
		newSpecRun(t, compileSpec(t, []byte(counterSpec)), `{"n": 12}`),
		newSpecRun(t, exampleSpec(t, "multiply.yaml"), `{"a": "987", "b": "9876"}`),
		newSpecRun(t, exampleSpec(t, "classify.yaml"), string(labels)),
	}
}

// TestSpecAnswers: a hinted step is answered from the spec's reference
// with accuracy p; right replies read as the reference's vote, wrong ones
// as another valid vote; malformed and overlong replies come at their
// rates; the server's counts agree with the spec's parser.
func TestSpecAnswers(t *testing.T) {
	t.Parallel()
	for _, r := range specRuns(t) {
		t.Run(r.tk.Name(), func(t *testing.T) {
			t.Parallel()
			cfg := Config{Accuracy: 0.75, MalformedRate: 0.05, OverlongRate: 0.03, Seed: 11, Tasks: specSource(r.tk)}
			srv := newServer(t, cfg)
			requests := max(2, 64/len(r.states)) // ~1000 choices in all
			var ty specTally
			for i := range r.states {
				ty.merge(r.draw(t, srv, i, requests, 100*i))
			}
			total := ty.correct + ty.wrong + ty.malformed + ty.overlong
			checkBinomial(t, "right answers", ty.correct, ty.correct+ty.wrong, cfg.Accuracy)
			checkBinomial(t, "malformed replies", ty.malformed, total, cfg.MalformedRate)
			checkBinomial(t, "overlong replies", ty.overlong, total, cfg.OverlongRate)
			st := srv.Stats()
			if st.Unrecognized != 0 || st.Correct != int64(ty.correct) || st.Wrong != int64(ty.wrong) ||
				st.Malformed != int64(ty.malformed) || st.Overlong != int64(ty.overlong) {
				t.Errorf("server counts %+v; the spec's parser %d right, %d wrong, %d malformed, %d overlong",
					st, ty.correct, ty.wrong, ty.malformed, ty.overlong)
			}
		})
	}
}

// TestSpecRepliesRoundTrip: at accuracy 1 every reply reads as the
// reference's vote; at temperature 0 every choice of every seed is the
// same reply; an overlong reply is cut at the token limit with the answer
// at its start.
func TestSpecRepliesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, r := range specRuns(t) {
		perfect := newServer(t, Config{Accuracy: 1, Seed: 2, Tasks: specSource(r.tk)})
		noisy := newServer(t, Config{Accuracy: 0.5, MalformedRate: 0.2, Seed: 2, Tasks: specSource(r.tk)})
		for i := range r.states {
			if ty := r.draw(t, perfect, i, 1, i); ty.correct != 16 {
				t.Errorf("%s step %d: %+v, want 16 right", r.tk.Name(), i, ty)
			}
			var greedy []string
			for seed := range 3 {
				resp := mustChat(t, noisy, r.body(t, i, map[string]any{"seed": seed, "n": 4, "temperature": 0}), headers(r.hint(i))...)
				for _, c := range resp.Choices {
					greedy = append(greedy, c.Message.Content)
				}
			}
			if n := len(distinct(greedy)); n != 1 {
				t.Errorf("%s step %d: %d different replies at temperature 0", r.tk.Name(), i, n)
			}
		}
		always := newServer(t, Config{OverlongRate: 1, Tasks: specSource(r.tk)})
		right, err := r.in.Render(r.states[0], r.answer[0])
		if err != nil {
			t.Fatal(err)
		}
		resp := mustChat(t, always, r.body(t, 0, map[string]any{"seed": 1, "max_tokens": 64}), headers(r.hint(0))...)
		if c := resp.Choices[0]; c.FinishReason != "length" || len(c.Message.Content) != 64*4 || !strings.HasPrefix(c.Message.Content, right) {
			t.Errorf("%s: overlong reply finish %q, %d bytes, want %q cut at 256 bytes: %q",
				r.tk.Name(), c.FinishReason, len(c.Message.Content), right, c.Message.Content)
		}
	}
}

// TestSpecHardSteps: HardFraction picks hinted steps too, by their
// prompt: exactly the hard ones are ever answered wrong when Accuracy is 1.
func TestSpecHardSteps(t *testing.T) {
	t.Parallel()
	r := newSpecRun(t, compileSpec(t, []byte(counterSpec)), `{"n": 24}`)
	srv := newServer(t, Config{Accuracy: 1, HardFraction: 0.5, HardAccuracy: 0.2, Seed: 6, Tasks: specSource(r.tk)})
	hard := 0
	for i := range r.states {
		isHard := srv.accuracy(msgHash(t, r.body(t, i, nil))) == 0.2
		ty := r.draw(t, srv, i, 1, i) // a hard step right 16 times of 16 at 0.2: 7e-12
		if (ty.wrong > 0) != isHard {
			t.Errorf("step %d: hard %v, but %d wrong replies of %d", i, isHard, ty.wrong, ty.correct+ty.wrong)
		}
		if isHard {
			hard++
		}
	}
	checkBinomial(t, "hard steps", hard, len(r.states), 0.5)
}

// TestSpecWrongSpread: a hinted step's wrong replies are the spec's wrong
// answers that are votes, each once: spread 1 always the first, spread N
// the first N, spread 0 all of them; the right rate stays p.
func TestSpecWrongSpread(t *testing.T) {
	t.Parallel()
	const accuracy = 0.2 // many wrong replies; p_eff = p at any temperature
	counter := newSpecRun(t, compileSpec(t, []byte(counterSpec)), `{"n": 8}`)
	multiply := newSpecRun(t, exampleSpec(t, "multiply.yaml"), `{"a": "987", "b": "96"}`)
	candidates := map[*specRun]func(t *testing.T, i int) []string{
		counter: func(t *testing.T, i int) []string {
			var s struct{ Total int }
			if err := json.Unmarshal(counter.states[i], &s); err != nil {
				t.Fatal(err)
			}
			return counterWrong(i, s.Total)
		},
		multiply: func(_ *testing.T, i int) []string { return multiplyWrong(multiply.answer[i]) },
	}
	for _, r := range []*specRun{counter, multiply} {
		for _, spread := range []int{0, 1, 2, 3} {
			t.Run(fmt.Sprint(r.tk.Name(), " spread=", spread), func(t *testing.T) {
				t.Parallel()
				srv := newServer(t, Config{Accuracy: accuracy, Seed: 5, WrongSpread: spread, Tasks: specSource(r.tk)})
				var all specTally
				for i := range r.states {
					ty := r.draw(t, srv, i, 6, 1000*i) // ~77 wrong replies
					all.merge(ty)
					want := candidates[r](t, i)
					if len(want) < 2 {
						t.Fatalf("step %d: %d wrong candidates, want at least 2", i, len(want))
					}
					if spread > 0 && spread < len(want) {
						want = want[:spread]
					}
					if got := distinct(ty.wrongKeys); !slices.Equal(got, distinct(want)) {
						t.Errorf("step %d: wrong votes %v, want %v", i, got, want)
					}
				}
				if all.malformed+all.overlong != 0 {
					t.Errorf("%d malformed and %d overlong replies, want none", all.malformed, all.overlong)
				}
				checkBinomial(t, "right answers", all.correct, all.correct+all.wrong, accuracy)
				if st := srv.Stats(); st.Correct != int64(all.correct) || st.Wrong != int64(all.wrong) {
					t.Errorf("server counts %d right, %d wrong; the spec's parser %d, %d", st.Correct, st.Wrong, all.correct, all.wrong)
				}
			})
		}
	}
}

// unrecognized fails t unless every choice of the response to body with
// hdr is the reply to a prompt the model does not know.
func unrecognized(t *testing.T, srv *Server, body string, hdr ...string) {
	t.Helper()
	before := srv.Stats()
	resp := mustChat(t, srv, body, hdr...)
	for _, c := range resp.Choices {
		known := slices.ContainsFunc(unrecognizedReplies, func(r string) bool { return strings.HasPrefix(c.Message.Content, r) })
		if !known || !strings.Contains(c.Message.Content, "[simulated model]") || c.FinishReason != "stop" {
			t.Errorf("choice %d: finish %q, %q; want the unrecognized reply, saying why", c.Index, c.FinishReason, c.Message.Content)
		}
	}
	after := srv.Stats()
	if d := after.Unrecognized - before.Unrecognized; d != int64(len(resp.Choices)) || after.Correct+after.Wrong != before.Correct+before.Wrong {
		t.Errorf("stats went from %+v to %+v; want %d more unrecognized, nothing else", before, after, len(resp.Choices))
	}
}

// TestSpecHintFallback: a hint the model cannot use (unknown task, version
// or hash, params or state the spec refuses, no reference, unreadable
// headers) leaves the request to the prompt reader: a spec's prompt is
// unrecognized. Valid hints for the same step, asked before and between,
// are still answered.
func TestSpecHintFallback(t *testing.T) {
	t.Parallel()
	counter := newSpecRun(t, compileSpec(t, []byte(counterSpec)), `{"n": 12}`)
	classify := exampleSpec(t, "classify.yaml")
	// Without truth, classify has no reference answer.
	noTruth := llm.SimHint{Task: classify.Name(), Version: classify.Version(), Hash: classify.Hash(),
		Params: []byte(`{"choices": ["yes", "no"], "records": ["a", "b"]}`), State: []byte(`{"n": 0, "labels": []}`)}
	srv := newServer(t, Config{Accuracy: 0.9, Seed: 2, Tasks: specSource(counter.tk, classify)})
	const step = 3
	body := counter.body(t, step, map[string]any{"seed": 1, "n": 4, "temperature": 0.1})
	answered := func(t *testing.T) {
		t.Helper()
		if ty := counter.draw(t, srv, step, 1, 7); ty.correct+ty.wrong != 16 {
			t.Fatalf("a valid hint is not answered: %+v", ty)
		}
	}
	answered(t) // the caches now hold the step

	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	with := func(f func(h *llm.SimHint)) []string {
		h := counter.hint(step)
		f(&h)
		return headers(h)
	}
	// raw is the step's hint with one header's value replaced.
	raw := func(name, value string) []string {
		hdr := headers(counter.hint(step))
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == name {
				hdr[i+1] = value
			}
		}
		return hdr
	}
	tests := []struct {
		name string
		hdr  []string
	}{
		{"unknown task", with(func(h *llm.SimHint) { h.Task = "sim-nothing" })},
		{"unknown version", with(func(h *llm.SimHint) { h.Version = "9.9.9" })},
		{"other hash", with(func(h *llm.SimHint) { h.Hash = fmt.Sprintf("sha256:%064x", 1) })},
		{"other task's hash", with(func(h *llm.SimHint) { h.Hash = classify.Hash() })},
		{"a built-in task", with(func(h *llm.SimHint) { h.Task, h.Version, h.Hash = "hanoi", "", "" })},
		{"params not JSON", with(func(h *llm.SimHint) { h.Params = []byte(`{"n": `) })},
		{"params refused", with(func(h *llm.SimHint) { h.Params = []byte(`{"n": "twelve"}`) })},
		{"params a list", with(func(h *llm.SimHint) { h.Params = []byte(`[12]`) })},
		{"state not JSON", with(func(h *llm.SimHint) { h.State = []byte(`{"i": 3,`) })},
		{"state null", with(func(h *llm.SimHint) { h.State = []byte(`null`) })},
		{"state of another shape", with(func(h *llm.SimHint) { h.State = []byte(`{"step": 3}`) })},
		{"state empty", with(func(h *llm.SimHint) { h.State = nil })},
		{"no reference", headers(noTruth)},
		{"params not base64", raw("X-Maker-Params", "{not base64!}")},
		{"state not base64", raw("X-Maker-State", "%%%")},
		{"only the task", []string{"X-Maker-Task", counter.tk.Name()}},
		{"no task", raw("X-Maker-Task", "")},
		{"no task, the rest valid", []string{"X-Maker-Task-Version", "1.0.0", "X-Maker-Task-Hash", counter.tk.Hash(),
			"X-Maker-Params", b64(`{"n": 12}`), "X-Maker-State", b64(string(counter.states[step]))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			unrecognized(t, srv, body, tt.hdr...)
			answered(t)
		})
	}

	t.Run("no task source", func(t *testing.T) {
		unrecognized(t, newServer(t, Config{Seed: 2}), body, headers(counter.hint(step))...)
	})
}

// TestSpecUnanswerableSaysWhy: the reply to a step the model cannot
// answer names the cause, which the job's red flags then carry: no hints,
// no way to read specs, a reference that gives nothing, fails, or is
// refused by the spec's own answer schema.
func TestSpecUnanswerableSaysWhy(t *testing.T) {
	t.Parallel()
	counter := newSpecRun(t, compileSpec(t, []byte(counterSpec)), `{"n": 12}`)
	classify := exampleSpec(t, "classify.yaml")
	// Its reference answers a negative total, which its schema refuses.
	badRef := compileSpec(t, []byte(strings.NewReplacer("name: sim-counter", "name: sim-badref",
		"reference: '{\"total\": state.total", "reference: '{\"total\": -1000 - state.total").Replace(counterSpec)))
	const step = 3
	body := counter.body(t, step, map[string]any{"seed": 1, "n": 2, "temperature": 0.1})
	withTasks := newServer(t, Config{Seed: 2, Tasks: specSource(counter.tk, classify, badRef)})
	badHint := counter.hint(step)
	badHint.Task, badHint.Hash = badRef.Name(), badRef.Hash()
	for _, tc := range []struct {
		name string
		srv  *Server
		hdr  []string
		want string
	}{
		{"no hints", withTasks, nil, "--sim-hints"},
		{"no task source", newServer(t, Config{Seed: 2}), headers(counter.hint(step)), "--nats URL"},
		{"no reference", withTasks, headers(llm.SimHint{Task: classify.Name(), Version: classify.Version(), Hash: classify.Hash(),
			Params: []byte(`{"choices": ["yes", "no"], "records": ["a", "b"]}`), State: []byte(`{"n": 0, "labels": []}`)}), "no answer (null)"},
		{"reference refused by its own schema", withTasks, headers(badHint), "own answer rules refuse its reference"},
		{"params by reference, none readable", withTasks, headers(func() llm.SimHint {
			h := counter.hint(step)
			h.Params, h.ParamsRef = nil, schemas.InputRef([]byte(`{"n": 12}`))
			return h
		}()), "params kept by reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := mustChat(t, tc.srv, body, tc.hdr...)
			for _, c := range resp.Choices {
				if !strings.Contains(c.Message.Content, tc.want) {
					t.Errorf("reply %q does not say %q", c.Message.Content, tc.want)
				}
			}
		})
	}
}

// TestSpecHintsConcurrently: valid and useless hints for the same steps,
// from many goroutines, are each answered as they would be alone.
func TestSpecHintsConcurrently(t *testing.T) {
	t.Parallel()
	r := newSpecRun(t, compileSpec(t, []byte(counterSpec)), `{"n": 12}`)
	srv := newServer(t, Config{Accuracy: 1, Seed: 3, Tasks: specSource(r.tk)})
	// Bodies are made here: t may not fail from another goroutine.
	const workers, rounds = 8, 24
	bodies := make([][]string, workers)
	for g := range bodies {
		for k := range rounds {
			bodies[g] = append(bodies[g], r.body(t, (g+k)%len(r.states), map[string]any{"seed": k, "n": 2, "temperature": 0.1}))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := range workers {
		wg.Go(func() {
			for k := range rounds {
				i := (g + k) % len(r.states)
				h := r.hint(i)
				want := r.refs[i]
				if k%2 == 1 {
					h.Task, want = "sim-other", ""
				}
				w := post(srv, bodies[g][k], headers(h)...)
				var resp chatResponse
				if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != http.StatusOK {
					errs <- fmt.Errorf("status %d, %v", w.Code, err)
					return
				}
				for _, c := range resp.Choices {
					v, err := r.in.Parse(r.states[i], c.Message.Content)
					if want != "" && (err != nil || v.Key != want) || want == "" && err == nil {
						errs <- fmt.Errorf("step %d, task %s: reply %q reads as %v, %v; want %q", i, h.Task, c.Message.Content, v, err, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSpecHintOnHanoiPrompt: a hint naming hanoi.yaml, whose prompt the
// model reads as a Towers of Hanoi step, is answered by the prompt reader;
// its replies read, with the spec's parser, as the spec's reference vote
// at accuracy p.
func TestSpecHintOnHanoiPrompt(t *testing.T) {
	t.Parallel()
	r := newSpecRun(t, exampleSpec(t, "hanoi.yaml"), `{"disks": 4}`)
	srv := newServer(t, Config{Accuracy: 0.8, Seed: 4, Tasks: specSource(r.tk)})
	var all specTally
	for i := range r.states {
		all.merge(r.draw(t, srv, i, 3, 10*i))
	}
	if all.malformed+all.overlong != 0 {
		t.Errorf("%d malformed, %d overlong replies; want none", all.malformed, all.overlong)
	}
	checkBinomial(t, "right answers", all.correct, all.correct+all.wrong, 0.8)
	if st := srv.Stats(); st.Correct != int64(all.correct) || st.Wrong != int64(all.wrong) || st.Unrecognized != 0 {
		t.Errorf("server counts %+v; the spec's parser %d right, %d wrong", st, all.correct, all.wrong)
	}
}
