package spec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/makerfleet/makerfleet/internal/lru"
	"github.com/makerfleet/makerfleet/internal/plainjson"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Task is a compiled spec: a task.Task whose instances run the spec's
// expressions and templates.
type Task struct {
	spec   schemas.TaskSpec
	source []byte
	hash   string

	params   *schema
	initial  *expr
	maxSteps *expr
	expected *expr
	system   *tmpl
	user     *tmpl
	reader   reader
	answer   *schema
	render   *tmpl
	vote     []string
	next     *expr
	done     *expr
	redFlags []redFlag
	checks   []redFlag // param checks
	ref      *expr
	wrong    *expr
	progress *expr
	result   *expr
	lets     []let

	// bound are recent instances by params: the roles of a fleet in one
	// process, and a voter's jobs with the same params, share one (and
	// its caches).
	bound *lru.Cache[string, result[*Instance]]
}

var _ task.Task = (*Task)(nil)

// Name implements task.Task.
func (t *Task) Name() string { return t.spec.Name }

// Version is the spec's version.
func (t *Task) Version() string { return t.spec.Version }

// Hash is the spec's content hash, "sha256:<hex>" of its source.
func (t *Task) Hash() string { return t.hash }

// Spec returns the spec as written.
func (t *Task) Spec() schemas.TaskSpec { return t.spec }

// Source returns the spec file as compiled.
func (t *Task) Source() []byte { return bytes.Clone(t.source) }

// HasReference reports whether the spec says the right answer for a state.
func (t *Task) HasReference() bool { return t.ref != nil }

// Hash returns the content hash of a spec source: "sha256:" and the hex
// digest.
func Hash(src []byte) string {
	sum := sha256.Sum256(src)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CompileSpec is Compile as a task.Compiler, for the fleet's task
// registry.
func CompileSpec(src []byte) (task.Spec, error) {
	t, err := Compile(src)
	if err != nil {
		return nil, err // not a typed nil
	}
	return t, nil
}

var _ task.Compiler = CompileSpec

// Compile reads a spec (YAML or JSON) and checks it completely. An
// invalid spec yields Errors (wrapping ErrInvalid) listing every problem
// with its path and position.
func Compile(src []byte) (*Task, error) {
	d, err := load(src)
	if err != nil {
		return nil, err
	}
	var probs Errors
	add := func(ps Errors) { probs = append(probs, ps...) }
	add(checkShape(d))
	// Past the shape's problems (an unknown field, say), the rest is
	// checked too when its fields read, so one run names every problem.
	raw, _ := json.Marshal(d.value)
	var sp schemas.TaskSpec
	if err := json.Unmarshal(raw, &sp); err != nil {
		if len(probs) == 0 {
			probs = Errors{{Msg: err.Error()}}
		}
		sortProblems(probs)
		return nil, probs
	}
	t := &Task{spec: sp, source: bytes.Clone(src), hash: Hash(src), bound: lru.New[string, result[*Instance]](16)}
	var letNames []string
	for i, l := range sp.Let {
		switch {
		case l.Name == varParams || l.Name == varState || l.Name == varAnswer:
			add(Errors{d.problem(fmt.Sprintf("let[%d].name", i), fmt.Sprintf("%q is a variable every expression has: give the let another name", l.Name))})
		case slices.Contains(letNames, l.Name):
			add(Errors{d.problem(fmt.Sprintf("let[%d].name", i), fmt.Sprintf("%q given twice", l.Name))})
		default:
			letNames = append(letNames, l.Name)
		}
	}
	env, err := newEnv(letNames...)
	if err != nil {
		return nil, fmt.Errorf("spec: CEL environment: %w", err)
	}
	compile := func(dst **expr, path, src string, allowed []string, want string) {
		if src == "" {
			return
		}
		e, errs := compileExpr(env, d, path, src, allowed, want, letNames...)
		add(errs)
		*dst = e
	}
	// The lets, in order: each sees params, state and the lets before it;
	// one that reads state (itself, or through another) is seen only by
	// expressions that see state.
	var paramLets, allLets []string
	for i, l := range sp.Let {
		if !slices.Contains(letNames, l.Name) || slices.ContainsFunc(t.lets, func(x let) bool { return x.name == l.Name }) {
			continue
		}
		var e *expr
		compile(&e, fmt.Sprintf("let[%d].expr", i), l.Expr, append([]string{varParams, varState}, allLets...), "")
		if e == nil {
			continue
		}
		readsState := false
		for _, r := range references(e.ast) {
			readsState = readsState || r == varState || slices.Contains(allLets, r) && !slices.Contains(paramLets, r)
		}
		t.lets = append(t.lets, let{name: l.Name, e: e})
		allLets = append(allLets, l.Name)
		if !readsState {
			paramLets = append(paramLets, l.Name)
		}
	}
	p := append([]string{varParams}, paramLets...)
	ps := append([]string{varParams, varState}, allLets...)
	psa := append([]string{varParams, varState, varAnswer}, allLets...)
	var errs Errors
	t.params, errs = compileSchema(d, "params", sp.Params, true)
	add(errs)
	compile(&t.initial, "initial", sp.Initial, p, "")
	compile(&t.maxSteps, "max_steps", sp.MaxSteps, p, "int")
	compile(&t.expected, "expected_steps", sp.ExpectedSteps, p, "int")
	compile(&t.done, "done", sp.Done, ps, "bool")
	compile(&t.ref, "reference", sp.Reference, ps, "") // an object, or null
	compile(&t.wrong, "wrong", sp.Wrong, ps, "list")
	compile(&t.progress, "progress", sp.Progress, ps, "number")
	compile(&t.result, "result", sp.Result, ps, "")
	if sp.Prompt.System != "" {
		t.system, errs = compileTemplate(d, "prompt.system", sp.Prompt.System)
		add(errs)
	}
	t.user, errs = compileTemplate(d, "prompt.user", sp.Prompt.User)
	add(errs)
	add(t.compileAnswer(d))
	switch n := sp.Next; {
	case n.Field != "" && n.Expr != "":
		add(Errors{d.problem("next", "give field or expr, not both")})
	case n.Field != "":
		if !t.answerHas(n.Field) {
			add(Errors{d.problem("next.field", fmt.Sprintf("%q is not a field of the answer", n.Field))})
		}
		if len(sp.Vote) > 0 && !slices.Contains(sp.Vote, n.Field) {
			add(Errors{d.problem("next.field", fmt.Sprintf("%q is not a vote field: the next state must be part of what was voted on", n.Field))})
		}
	case n.Expr != "":
		compile(&t.next, "next.expr", n.Expr, psa, "")
		// next sees the winner's vote: only the vote fields of its answer.
		// (Unless a vote field is already wrong: one problem, not two.)
		if t.next != nil && len(sp.Vote) > 0 && !slices.ContainsFunc(sp.Vote, func(f string) bool { return !t.answerHas(f) }) {
			fields, whole := answerFields(t.next.ast)
			for _, f := range fields {
				if !slices.Contains(sp.Vote, f) {
					add(Errors{d.problem("next.expr", fmt.Sprintf("reads answer.%s, which is not a vote field: next sees only the winner's vote fields %v (add %q to vote)", f, sp.Vote, f))})
				}
			}
			if whole {
				add(Errors{d.problem("next.expr", fmt.Sprintf("uses the whole answer, but next sees only the winner's vote fields %v: name the fields it reads (answer.f)", sp.Vote))})
			}
		}
	default:
		add(Errors{d.problem("next", "give field (the answer field that is the next state) or expr")})
	}
	for i, f := range sp.Vote {
		if !t.answerHas(f) {
			add(Errors{d.problem(fmt.Sprintf("vote[%d]", i), fmt.Sprintf("%q is not a field of the answer", f))})
		}
		if slices.Index(sp.Vote, f) != i {
			add(Errors{d.problem(fmt.Sprintf("vote[%d]", i), fmt.Sprintf("%q listed twice", f))})
		}
	}
	t.vote = slices.Clone(sp.Vote)
	slices.Sort(t.vote)
	checks := func(field string, list []schemas.TaskCheck, allowed []string) []redFlag {
		var out []redFlag
		seen := map[string]bool{}
		for i, c := range list {
			path := fmt.Sprintf("%s[%d]", field, i)
			if seen[c.Name] {
				add(Errors{d.problem(path+".name", fmt.Sprintf("%q given twice", c.Name))})
			}
			seen[c.Name] = true
			var e *expr
			compile(&e, path+".when", c.When, allowed, "bool")
			out = append(out, redFlag{name: c.Name, when: e})
		}
		return out
	}
	t.redFlags = checks("red_flags", sp.RedFlags, psa)
	// An expression reading an answer field the answer cannot have (a
	// typo: answer.lable) would fail on every reply.
	if fields, closed := t.answerFields(); closed {
		readers := []struct {
			path string
			e    *expr
		}{}
		if len(sp.Vote) == 0 { // else the vote fields' check above says it
			readers = append(readers, struct {
				path string
				e    *expr
			}{"next.expr", t.next})
		}
		for i, rf := range t.redFlags {
			readers = append(readers, struct {
				path string
				e    *expr
			}{fmt.Sprintf("red_flags[%d].when", i), rf.when})
		}
		for _, r := range readers {
			if r.e == nil {
				continue
			}
			read, _ := answerFields(r.e.ast)
			for _, f := range read {
				if !slices.Contains(fields, f) {
					add(Errors{d.problem(r.path, fmt.Sprintf("reads answer.%s, which the answer does not have (its fields: %v)", f, fields))})
				}
			}
		}
	}
	t.checks = checks("param_checks", sp.ParamChecks, p)
	if len(probs) > 0 {
		sortProblems(probs)
		return nil, probs
	}
	return t, nil
}

// compileAnswer checks the answer section: its format, pattern and group
// types, schema and render template.
func (t *Task) compileAnswer(d *doc) Errors {
	var probs Errors
	a := t.spec.Answer
	t.reader.format = a.Format
	switch a.Format {
	case schemas.AnswerJSON:
		if a.Regex != "" || len(a.Groups) > 0 {
			probs = append(probs, d.problem("answer", "regex and groups belong to format regex"))
		}
	case schemas.AnswerRegex:
		re, err := regexp.Compile(a.Regex)
		switch {
		case a.Regex == "":
			probs = append(probs, d.problem("answer.regex", "format regex needs a regex with a named group per answer field"))
		case err != nil:
			probs = append(probs, d.problem("answer.regex", "not a valid regular expression: "+strings.TrimPrefix(err.Error(), "error parsing regexp: ")))
		default:
			t.reader.re, t.reader.scan = re, newScanner(re)
			names := map[string]bool{}
			for _, n := range re.SubexpNames() {
				if n != "" {
					names[n] = true
				}
			}
			if len(names) == 0 {
				probs = append(probs, d.problem("answer.regex", "the pattern has no named group (?P<field>...)"))
			}
			for g, typ := range a.Groups {
				if !names[g] {
					probs = append(probs, d.problem("answer.groups."+g, fmt.Sprintf("the pattern has no group %q", g)))
				}
				if !groupTypes[typ] {
					probs = append(probs, d.problem("answer.groups."+g, fmt.Sprintf("unknown type %q (want string, int, number, bool or json)", typ)))
				}
			}
			t.reader.groups = a.Groups
		}
		if a.Render == "" {
			probs = append(probs, d.problem("answer.render", "format regex needs a render template (how an answer is written as a reply)"))
		}
	}
	var errs Errors
	t.answer, errs = compileSchema(d, "answer.schema", a.Schema, false)
	probs = append(probs, errs...)
	if a.Render != "" {
		t.render, errs = compileTemplate(d, "answer.render", a.Render)
		probs = append(probs, errs...)
	}
	return probs
}

// answerHas reports whether the answer can have field f: a property of
// the answer schema, or a named group of the pattern.
// answerFields lists the fields an answer can have, and whether that is
// all of them: a regex's named groups, or a schema's properties when it
// allows no others.
func (t *Task) answerFields() ([]string, bool) {
	if re := t.reader.re; re != nil {
		var out []string
		for _, n := range re.SubexpNames() {
			if n != "" && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
		return out, true
	}
	var sch struct {
		Properties           map[string]json.RawMessage `json:"properties"`
		AdditionalProperties *bool                      `json:"additionalProperties"`
	}
	if json.Unmarshal(t.spec.Answer.Schema, &sch) != nil || sch.AdditionalProperties == nil || *sch.AdditionalProperties {
		return nil, false
	}
	out := make([]string, 0, len(sch.Properties))
	for f := range sch.Properties {
		out = append(out, f)
	}
	slices.Sort(out)
	return out, true
}

func (t *Task) answerHas(f string) bool {
	if re := t.reader.re; re != nil {
		return slices.Contains(re.SubexpNames(), f)
	}
	var sch struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(t.spec.Answer.Schema, &sch)
	_, ok := sch.Properties[f]
	return ok
}

// compileSchema compiles the JSON Schema at path (nil: any object, when
// optional).
func compileSchema(d *doc, path string, raw json.RawMessage, optional bool) (*schema, Errors) {
	if len(raw) == 0 || string(raw) == "null" {
		if !optional {
			return nil, Errors{d.problem(path, "a JSON Schema is required")}
		}
		raw = json.RawMessage(`{"type":"object"}`)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, Errors{d.problem(path, "not JSON: "+err.Error())}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// No loader: a schema may not fetch anything ($ref to a URL fails).
	c.UseLoader(noLoader{})
	url := "mem://spec/" + path
	if err := c.AddResource(url, v); err != nil {
		return nil, Errors{d.problem(path, "not a JSON Schema: "+err.Error())}
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, Errors{d.problem(path, "not a JSON Schema: "+err.Error())}
	}
	// The quick form reads the same document the compiler accepted.
	var q *quick
	if doc, err := plainjson.Decode(raw); err == nil {
		q = newQuick(doc, 0)
	}
	return &schema{full: sch, quick: q}, nil
}

// noLoader refuses every external schema.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("loading %s: a task spec's schemas may not refer to other documents", url)
}
