package schemas

import (
	"encoding/json"
	"regexp"
	"time"
)

// TaskSpec is a task described in a file (YAML or JSON) rather than in Go:
// how a job's params make the initial state, what the model is asked at
// each step, how its reply is read and voted on, and how the next state
// follows from the winning answer. Expressions are CEL (cel.dev), checked
// when the spec is validated and run under a cost limit; prompts are Go
// text/template. task/spec compiles a TaskSpec into a task.
//
// Expression variables: params (the job's params), state (the state the
// step starts from), answer (a parsed reply, as an object).
type TaskSpec struct {
	// Name is the task's registry name: 1-32 of a-z, 0-9, '_' and '-',
	// starting with a letter.
	Name string `json:"name"`
	// Version names this revision of the task, e.g. "1.0.0": 1-32 of
	// letters, digits, '.', '_' and '-'. A registered name@version is
	// immutable.
	Version string `json:"version"`
	// Description says what the task does, for people.
	Description string `json:"description,omitempty"`
	// Params is the JSON Schema a job's params must satisfy (draft
	// 2020-12). Default: any object.
	Params json.RawMessage `json:"params,omitempty"`
	// ParamChecks refuse params the schema cannot judge (a transfer naming
	// an account that does not exist, say): each expression, from params,
	// is true for params to refuse.
	ParamChecks []TaskCheck `json:"param_checks,omitempty"`
	// Let names expressions the others share (a reference's helper, a
	// wrong generator's): each, from params and state and the lets before
	// it, is a variable of its name in every expression that sees what it
	// reads. Evaluated when first read, once per evaluation.
	Let []TaskLet `json:"let,omitempty"`
	// Initial is the expression of the state before the first step, from
	// params.
	Initial string `json:"initial"`
	// MaxSteps is the expression of the most steps a job may take, from
	// params; a job not done after that many steps ends unsolved.
	MaxSteps string `json:"max_steps"`
	// ExpectedSteps is the expression of the steps a job usually takes,
	// from params, when far fewer than MaxSteps (a loop bounded by
	// max_steps): k, cost forecasts and progress are planned for it.
	// Default: max_steps.
	ExpectedSteps string `json:"expected_steps,omitempty"`
	// Prompt is the step's messages: templates over .state and .params,
	// holding only what the step needs, never the job's history.
	Prompt TaskPrompt `json:"prompt"`
	// Answer says how a reply is read, strictly: anything else is a red
	// flag.
	Answer TaskAnswer `json:"answer"`
	// Vote lists the answer fields that form the vote: two replies are
	// votes for the same candidate when these fields are equal. Default:
	// every field of the answer.
	Vote []string `json:"vote,omitempty"`
	// Next is how the next state follows from the winning answer.
	Next TaskNext `json:"next"`
	// Done is the expression that says a state is the goal, from state and
	// params.
	Done string `json:"done"`
	// RedFlags reject replies that parse but must not be votes (say, an
	// illegal move), each with a reason name.
	RedFlags []TaskCheck `json:"red_flags,omitempty"`
	// Reference is the expression of the right answer from state and
	// params (an object of the answer's fields, or null where there is
	// none), optional. The verifier counts decided steps that differ from
	// it (it never corrects them), and the simulated model answers from
	// it.
	Reference string `json:"reference,omitempty"`
	// Wrong is the expression of wrong but well-formed answers from state
	// and params (a list of answer objects), optional: the simulated
	// model's wrong answers. Without it the simulated model alters the
	// reference answer's fields.
	Wrong string `json:"wrong,omitempty"`
	// Progress is the expression of how far a state is along the task, a
	// number in [0, 1] from state and params, optional. Default: steps
	// decided over max steps.
	Progress string `json:"progress,omitempty"`
	// Result is the expression of the task's answer from the state a
	// solved job ended at and params (any JSON value: a product as a
	// decimal string, say), optional: the report's result. Without it
	// the answer is read from the report's final_state.
	Result string `json:"result,omitempty"`
}

// TaskPrompt is a step's prompt as text/template templates. Templates see
// .state and .params, the template language's own functions (len, index,
// eq, printf...) and json (compact JSON), plain (JSON with ", " between
// list items, as people write lists), add, sub, mul, div, mod (integers),
// at (a string's character or a list's item), get (an optional key) and
// join.
type TaskPrompt struct {
	// System is the system message (the rules, the strategy, the answer
	// format); optional.
	System string `json:"system,omitempty"`
	// User is the user message: the state the step starts from.
	User string `json:"user"`
}

// Answer formats.
const (
	// AnswerJSON: the reply's last JSON object is the answer.
	AnswerJSON = "json"
	// AnswerRegex: named groups of a regular expression are the answer's
	// fields (the last capture of each group in the reply).
	AnswerRegex = "regex"
)

// TaskAnswer says how a reply is read.
type TaskAnswer struct {
	// Format is json or regex.
	Format string `json:"format" jsonschema:"enum=json,enum=regex"`
	// Regex is the pattern of a regex answer (RE2 syntax), with a named
	// group per answer field, e.g. `move = (?P<move>\[[^\]]*\])`.
	Regex string `json:"regex,omitempty"`
	// Groups gives each named group's type: string (default), int, number,
	// bool or json (the capture is read as JSON).
	Groups map[string]string `json:"groups,omitempty"`
	// Schema is the JSON Schema the answer object must satisfy (draft
	// 2020-12); a reply that does not is red-flagged.
	Schema json.RawMessage `json:"schema"`
	// Render is the template that writes an answer (.answer, .state,
	// .params) as a reply: what the simulated model says. Default: the
	// answer as JSON (format json) — a regex task needs one.
	Render string `json:"render,omitempty"`
}

// TaskNext is how the next state follows from the winning answer: exactly
// one of Field and Expr.
type TaskNext struct {
	// Field is the answer field that is the next state, as the model gave
	// it (MAKER's way: the next step starts from the winner's own answer).
	Field string `json:"field,omitempty"`
	// Expr is the expression of the next state from state, answer and
	// params.
	Expr string `json:"expr,omitempty"`
}

// TaskLet is a named expression the spec's other expressions share.
type TaskLet struct {
	// Name is the variable's name: 1-32 of a-z, 0-9 and '_', starting
	// with a letter; not params, state or answer.
	Name string `json:"name"`
	// Expr is the expression, from params, state and the lets before it.
	Expr string `json:"expr"`
}

// TaskLetNamePattern is a let's name (TaskLet.Name).
const TaskLetNamePattern = `^[a-z][a-z0-9_]{0,31}$`

// TaskCheck refuses something when its expression holds: a reply (a red
// flag, its reason the name) or a job's params.
type TaskCheck struct {
	// Name is the check's name (a red flag's reason, as reports count it):
	// 1-40 of a-z, 0-9 and '_'.
	Name string `json:"name"`
	// When is the expression that is true for what to refuse: from state,
	// answer and params for a red flag, from params for a param check.
	When string `json:"when"`
}

var (
	taskSpecNameRE    = taskRE
	taskSpecVersionRE = regexp.MustCompile(TaskSpecVersionPattern)
	redFlagNameRE     = regexp.MustCompile(RedFlagNamePattern)
)

// ValidTaskSpecName checks a spec task's name.
func ValidTaskSpecName(s string) bool { return taskSpecNameRE.MatchString(s) }

// ValidTaskSpecVersion checks a spec task's version.
func ValidTaskSpecVersion(s string) bool { return taskSpecVersionRE.MatchString(s) }

// ValidRedFlagName checks a red flag's reason name.
func ValidRedFlagName(s string) bool { return redFlagNameRE.MatchString(s) }

// TaskRecord is a registered task spec, the value of its key in the task
// registry (KV maker_tasks, key <name>.<task_version>): immutable once
// written.
type TaskRecord struct {
	Header
	// Name and TaskVersion are the spec's name and version (the header's
	// version is the message format's).
	Name        string `json:"name"`
	TaskVersion string `json:"task_version"`
	// Hash is the spec's content hash: "sha256:" and the hex digest of
	// Source.
	Hash string `json:"hash"`
	// Source is the spec file as registered, byte for byte.
	Source string `json:"source"`
	// By names who registered it; At is when.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
}

// MessageKind implements Message.
func (*TaskRecord) MessageKind() string { return KindTaskRecord }

// Validate implements Message.
func (r *TaskRecord) Validate() error {
	const k = KindTaskRecord
	if err := r.Header.check(k); err != nil {
		return err
	}
	if !ValidTaskSpecName(r.Name) || !ValidTaskSpecVersion(r.TaskVersion) {
		return invalid(k, "name %q or task_version %q is not a task name and version", r.Name, r.TaskVersion)
	}
	if !taskHashRE.MatchString(r.Hash) {
		return invalid(k, "hash %q is not sha256:<64 hex digits>", r.Hash)
	}
	if r.Source == "" || len(r.Source) > MaxTaskSpecBytes {
		return invalid(k, "source must be 1 to %d bytes, got %d", MaxTaskSpecBytes, len(r.Source))
	}
	return nil
}

// MaxTaskSpecBytes bounds a task spec file.
const MaxTaskSpecBytes = 256 << 10

var taskHashRE = regexp.MustCompile(TaskHashPattern)

// ValidTaskHash checks a spec's content hash.
func ValidTaskHash(s string) bool { return taskHashRE.MatchString(s) }
