// Package spec turns a declarative task spec (schemas.TaskSpec, written in
// YAML or JSON) into a task.Task, so a user can run MAKER on a task of
// their own without writing Go.
//
// Compile reads and checks a spec completely before anything runs: the
// file against the spec's JSON Schema, then every CEL expression compiled
// and type-checked (cel.dev/cel-go, the sandboxed expression language:
// no I/O, a cost limit on every evaluation), every template parsed, the
// answer's pattern and the JSON Schemas compiled. Every problem is
// reported with its path in the file and, where there is one, its line and
// column (Errors).
//
// A compiled Task binds a job's params (checked against the spec's params
// schema) to an Instance, which implements task.Instance (prompt, strict
// parse, next state from the winning answer, done), task.Verifier (when the
// spec has a reference answer), task.Referencer and task.Drawer (the
// reference answer, and states drawn along the reference chain; without a
// reference both say task.ErrNoReference) and task.Progresser (when it has
// a progress expression). States and vote keys are canonical JSON: equal values have
// equal bytes. An expression or template that fails for one state is an
// error wrapping task.ErrEval, never a panic or a hang.
package spec
