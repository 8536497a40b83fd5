package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	"github.com/makerfleet/makerfleet/task/spec"
)

// taskCmd is maker task: write, check, try and register task specs.
func taskCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "task",
		Short: "Task specs: write one (init), check it (validate), try it (test, render, check), register it with a fleet, list, show and delete them",
		Long: `A task spec describes a task in a file (YAML or JSON): how a job's params make the
initial state, the prompt of each step, how a reply is read and voted on, and how
the next state follows from the winning answer (docs/tasks.md). Register it with a
running fleet, then submit jobs of it: maker submit --task NAME[@VERSION] --params JSON.`,
	})
	cmd.AddCommand(taskValidateCmd(e), taskInitCmd(e), taskTestCmd(e), taskRenderCmd(e), taskCheckCmd(e),
		taskRegisterCmd(e), taskListCmd(e), taskShowCmd(e), taskDeleteCmd(e))
	return cmd
}

func taskValidateCmd(e *env) *cobra.Command {
	var (
		asJSON bool
		pf     jobFlags // only its params
		steps  int64
	)
	cmd := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a task spec completely; print every problem with its place (exit 2 when there is one)",
		Args:  exactArgs(1, "FILE (a task spec)"),
		RunE: func(_ *cobra.Command, args []string) error {
			src, err := os.ReadFile(args[0])
			if err != nil {
				return usagef("%v", err)
			}
			t, err := spec.Compile(src)
			var probs spec.Errors
			if err != nil && !errors.As(err, &probs) {
				return err
			}
			// A built-in's name is said with every other problem.
			if msg := builtinName(spec.NameOf(src)); msg != "" {
				probs = append(spec.Errors{{Path: "name", Msg: msg}}, probs...)
			}
			if len(probs) > 0 {
				if asJSON {
					if err := writeJSON(e.stdout, map[string]any{"valid": false, "problems": probs}); err != nil {
						return err
					}
				} else {
					for _, p := range probs {
						fmt.Fprintf(e.stdout, "%s: %s\n", args[0], p)
					}
				}
				return usagef("%s: %d problem(s)", args[0], len(probs))
			}
			out := map[string]any{"valid": true, "name": t.Name(), "version": t.Version(), "hash": t.Hash()}
			if pf.params != "" || len(pf.paramsJSONL) > 0 {
				walked, err := dryRun(t, &pf, steps)
				if err != nil {
					if asJSON {
						out["valid"], out["problems"] = false, spec.Errors{{Path: "(dry run)", Msg: err.Error()}}
						if werr := writeJSON(e.stdout, out); werr != nil {
							return werr
						}
					} else {
						fmt.Fprintf(e.stdout, "%s: dry run on --params: %v\n", args[0], err)
					}
					return usagef("%s: the dry run on --params failed after %d step(s)", args[0], walked)
				}
				out["dry_run_steps"] = walked
				if !asJSON {
					fmt.Fprintf(e.stdout, "%s: dry run on --params: %d step(s) along the reference: prompts, reference answers, next states and done all work\n", args[0], walked)
				}
			}
			if asJSON {
				return writeJSON(e.stdout, out)
			}
			fmt.Fprintf(e.stdout, "%s: ok: %s@%s (%s)\n", args[0], t.Name(), t.Version(), t.Hash())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&pf.params, "params", "", "also dry-run the spec on these params (JSON, or @FILE): bind them and walk the reference for --steps steps")
	cmd.Flags().StringArrayVar(&pf.paramsJSONL, "params-jsonl", nil, "with --params: add a params field holding a JSON Lines file's values, FIELD=FILE (repeatable)")
	cmd.Flags().Int64Var(&steps, "steps", 100, "with --params: the most steps the dry run walks")
	return cmd
}

// dryRun binds the params pf names to t and walks its reference for at
// most steps steps (spec.Instance.DryRun).
func dryRun(t *spec.Task, pf *jobFlags, steps int64) (int64, error) {
	if steps < 1 {
		return 0, usagef("--steps must be >= 1")
	}
	params, err := pf.paramsFor(task.Ref{Name: t.Name(), Version: t.Version()})
	if err != nil {
		return 0, err
	}
	if len(params) > schemas.MaxParamsBytes {
		return 0, fmt.Errorf("the params are %s, over the fleet's limit of %s", jobs.Bytes(int64(len(params))), jobs.Bytes(schemas.MaxParamsBytes))
	}
	inst, err := t.Bind(params)
	if err != nil {
		return 0, fmt.Errorf("params: %w", err)
	}
	return inst.(*spec.Instance).DryRun(steps)
}

func taskInitCmd(e *env) *cobra.Command {
	var out string
	var force bool
	cmd := &cobra.Command{
		Use:   "init NAME",
		Short: "Write a commented starter task spec NAME.yaml (a counting task that validates and runs)",
		Args:  exactArgs(1, "NAME (the task's name)"),
		RunE: func(_ *cobra.Command, args []string) error {
			name := args[0]
			if !schemas.ValidTaskSpecName(name) {
				return usagef("task name %q: 1-32 of a-z, 0-9, '_' and '-', starting with a letter", name)
			}
			if _, err := builtin.Registry().Lookup(name); err == nil {
				return usagef("%q is a built-in task's name; choose another", name)
			}
			if out == "" {
				out = name + ".yaml"
			}
			src := strings.ReplaceAll(starterSpec, "NAME", name)
			if _, err := spec.Compile([]byte(src)); err != nil {
				return fmt.Errorf("the starter spec does not compile: %w", err) // a bug of ours
			}
			flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
			if force {
				flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
			}
			f, err := os.OpenFile(out, flag, 0o644)
			if errors.Is(err, fs.ErrExist) {
				return usagef("%s exists: nothing written (--force overwrites it)", out)
			}
			if err != nil {
				return usagef("%v", err)
			}
			if _, err := f.WriteString(src); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "wrote %s: try it with\n  maker task validate %s\n  maker task test %s --params '{\"n\": 5}'\n", out, out, out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write (default NAME.yaml)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite the file if it exists")
	return cmd
}

func taskTestCmd(e *env) *cobra.Command {
	var (
		jf      jobFlags
		sf      simFlags
		steps   int64
		asJSON  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "test FILE --params JSON",
		Short: "Try a task spec: a small job on an in-process fleet against the simulated model, which answers from the spec's reference",
		Long: `test runs a job of the spec in FILE on a fleet inside this process (embedded
nats-server and Redis, the simulated model answering from the spec's reference answer
with accuracy --sim-accuracy), for at most --steps steps, and prints its report: the
wrong steps the verifier found, the red flags by reason, samples per step. A spec
without a reference, or whose reference is null for the params given, cannot be
tested this way (the simulated model cannot answer it).`,
		Example: `  maker task test examples/tasks/multiply.yaml --params '{"a": "1234", "b": "567"}' --steps 20`,
		Args:    exactArgs(1, "FILE (a task spec)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if steps < 0 {
				return usagef("--steps must be >= 0")
			}
			if jf.params == "" {
				return usagef("--params is required: the job's params as JSON, or @FILE")
			}
			src, t, err := readSpec(args[0])
			if err != nil {
				return err
			}
			if !t.HasReference() {
				return usagef("%s has no reference answer: the simulated model cannot answer it (add reference, or run it against a real model with maker run --task-file)", args[0])
			}
			simCfg, err := sf.config(jf.seed)
			if err != nil {
				return err
			}
			tasks := builtinTasks()
			tasks.Add(t)
			jf.task = t.Name() + "@" + t.Version()
			p := simCfg.EffectiveAccuracy(jf.tempRest)
			if p >= 1 && !cmd.Flags().Changed("k") {
				jf.k = 1
				_ = cmd.Flags().Set("k", "1")
				p = 0
			}
			job, inst, err := jf.spec(cmd, p, "the simulated model's accuracy (--sim-accuracy)", 1-sf.malformed-sf.overlong, tasks)
			if err != nil {
				return err
			}
			// A reference may give null for some params (classify.yaml's,
			// without truth), fail, or be refused by the spec's own answer
			// rules: the simulated model could only fail to answer.
			if in, ok := inst.(*spec.Instance); ok {
				_, _, err := in.ReferenceReply(in.Initial())
				switch {
				case errors.Is(err, spec.ErrNoReference):
					return usagef("%s: its reference gives no answer (null) for these params: the simulated model cannot answer it (give params it answers, or run it against a real model with maker run --task-file)", args[0])
				case err != nil:
					return usagef("%s: step 0: %v", args[0], err)
				}
			}
			noteNoWrong(e.stderr, inst, p)
			job.StepLimit = steps
			opts := fleetOptions{sim: simCfg, concurrency: 16, log: e.logger(slog.LevelWarn)}
			rep, err := runJobX(cmd.Context(), opts, &job, src, nil, runExtras{timeout: timeout})
			var timedOut errTimedOut
			if err != nil && !errors.As(err, &timedOut) {
				return err
			}
			if perr := printReport(e.stdout, rep, asJSON); perr != nil {
				return perr
			}
			if err != nil {
				return err
			}
			return testVerdict(rep, steps)
		},
	}
	addJobFlags(cmd, &jf, "the simulated model's accuracy")
	addSimFlags(cmd, &sf)
	for _, name := range []string{"task", "disks", "tenant", "job-id"} {
		_ = cmd.Flags().MarkHidden(name)
	}
	cmd.Flags().Lookup("params").Usage = "the job's params as JSON (checked against the spec's params schema), or @FILE to read them from a file"
	cmd.Flags().Int64Var(&steps, "steps", 20, "stop after this many decided steps (0: run the whole job)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "cancel the job after this long and print its partial report (exit 124); 0: no limit")
	return cmd
}

// errTestFailed: a task test's job did not pass; the report says why.
var errTestFailed = errors.New("the test job failed")

// testVerdict is nil when a task test's job passed: solved, or stopped at
// its step limit (--steps) with no wrong step; otherwise an error naming
// the state and reason (exit 1), so that `maker task test` can gate CI.
func testVerdict(rep schemas.JobReport, steps int64) error {
	switch {
	case rep.State == schemas.StateSolved:
		return nil
	case rep.State == schemas.StateUnsolved && steps > 0 && rep.Steps == steps && rep.Errors == 0:
		return nil
	case rep.Errors > 0:
		return fmt.Errorf("%w (%s) with %d wrong step(s) (the verifier's): %s", errTestFailed, rep.State, rep.Errors, rep.Reason)
	}
	return fmt.Errorf("%w (%s): %s", errTestFailed, rep.State, rep.Reason)
}

func taskRegisterCmd(e *env) *cobra.Command {
	var natsURL, by string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "register FILE",
		Short: "Register a task spec with a fleet: an immutable name@version (registering the same spec again changes nothing)",
		Args:  exactArgs(1, "FILE (a task spec)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, _, err := readSpec(args[0])
			if err != nil {
				return err
			}
			// Writing: the fleet's topology is made if it is missing.
			reg, closeFn, err := taskRegistry(cmd.Context(), natsURL, true)
			if err != nil {
				return err
			}
			defer closeFn()
			rec, created, err := reg.Register(cmd.Context(), src, by)
			if errors.Is(err, taskreg.ErrConflict) || errors.Is(err, taskreg.ErrBuiltin) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, map[string]any{"name": rec.Name, "version": rec.TaskVersion, "hash": rec.Hash, "created": created})
			}
			what := "registered"
			if !created {
				what = "already registered (the same spec): nothing changed"
			}
			fmt.Fprintf(e.stdout, "%s@%s %s (%s)\n", rec.Name, rec.TaskVersion, what, rec.Hash)
			return nil
		},
	}
	natsFlag(cmd, &natsURL)
	cmd.Flags().StringVar(&by, "by", envOr("USER", ""), "who registers it (kept with the spec)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func taskListCmd(e *env) *cobra.Command {
	var natsURL string
	var asJSON bool
	var api *apiFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the built-in tasks and the task specs registered with the fleet",
		Long:  "Lists the built-in tasks, then every registered version of each task spec.\n" + apiHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tasks, err := openTasks(cmd, api, natsURL)
			if err != nil {
				return err
			}
			defer tasks.Close()
			infos, err := tasks.List(cmd.Context())
			if err != nil {
				return err
			}
			type row struct {
				Name    string    `json:"name"`
				Version string    `json:"version,omitempty"`
				Hash    string    `json:"hash,omitempty"`
				Builtin bool      `json:"builtin"`
				By      string    `json:"by,omitempty"`
				At      time.Time `json:"registered_at,omitzero"`
			}
			var rows []row
			for _, t := range infos {
				rows = append(rows, row{Name: t.Name, Version: t.Version, Hash: t.Hash, Builtin: t.Builtin, By: t.By, At: t.RegisteredAt})
			}
			if asJSON {
				return writeJSON(e.stdout, rows)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tHASH\tREGISTERED")
			for _, r := range rows {
				if r.Builtin {
					fmt.Fprintf(tw, "%s\t(built in)\t\t\n", r.Name)
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s by %s\n", r.Name, r.Version, r.Hash[:min(len(r.Hash), len("sha256:")+12)], r.At.Format(time.RFC3339), r.By)
			}
			return tw.Flush()
		},
	}
	natsFlag(cmd, &natsURL)
	api = addAPIFlags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func taskShowCmd(e *env) *cobra.Command {
	var natsURL string
	var asJSON bool
	var api *apiFlags
	cmd := &cobra.Command{
		Use:   "show NAME[@VERSION]",
		Short: "Print a registered task spec as registered (the latest version unless one is named)",
		Long:  "Prints a registered task spec as registered (--json: its task_record).\n" + apiHelp,
		Args:  exactArgs(1, "NAME or NAME@VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, version, err := taskreg.ParseRef(args[0])
			if err != nil {
				return usageError{err}
			}
			if _, err := builtin.Registry().Lookup(name); err == nil && version == "" {
				return usagef("%q is a built-in task, written in Go (package task/%s), not a spec", name, name)
			}
			tasks, err := openTasks(cmd, api, natsURL)
			if err != nil {
				return err
			}
			defer tasks.Close()
			rec, err := tasks.Get(cmd.Context(), name, version)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, rec)
			}
			fmt.Fprintf(e.stderr, "# %s@%s  %s  registered %s by %s\n", rec.Name, rec.TaskVersion, rec.Hash, rec.At.Format(time.RFC3339), rec.By)
			_, err = fmt.Fprint(e.stdout, rec.Source)
			return err
		},
	}
	natsFlag(cmd, &natsURL)
	api = addAPIFlags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the record as JSON")
	return cmd
}

// openTasks opens the task registry for reading: through the API
// (--api), or on the fleet's NATS.
func openTasks(cmd *cobra.Command, api *apiFlags, natsURL string) (tasksPort, error) {
	hc, err := api.client(cmd)
	if err != nil {
		return nil, err
	}
	if hc != nil {
		return apiTasks{hc}, nil
	}
	reg, closeFn, err := taskRegistry(cmd.Context(), natsURL, false)
	if err != nil {
		return nil, err
	}
	return natsTasks{reg: reg, close: closeFn}, nil
}

// taskRegistry connects to the fleet's task registry: made if missing
// when write is set, else only opened (a read creates nothing).
func taskRegistry(ctx context.Context, natsURL string, write bool) (*taskreg.Registry, func(), error) {
	nc, err := bus.Connect(natsURL, "maker-task", natsAuth(ctx))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	cfg := topology.Config{StartupWait: 10 * time.Second}
	var topo *topology.Topology
	if write {
		topo, err = topology.Ensure(ctx, js, cfg)
	} else {
		topo, err = topology.Open(ctx, js, cfg)
	}
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%s: %w", bus.RedactURL(natsURL), err)
	}
	return taskreg.New(topo.Tasks, builtin.Registry(), spec.CompileSpec), nc.Close, nil
}

// starterSpec is what maker task init writes (NAME replaced): a small task
// that validates and runs, with every part explained.
const starterSpec = `# NAME: a starter task spec (maker task init). It counts from 0 to params.n, one
# step at a time, so it runs as it is: maker task test NAME.yaml --params '{"n": 5}'.
# Replace each part with your task's; docs/tasks.md explains them all.
name: NAME
version: 0.1.0
description: Counts to n, one step at a time (a starter; replace it with your task).

# The JSON Schema a job's params must satisfy.
params:
  type: object
  properties:
    n: {type: integer, minimum: 1, maximum: 100000}
  required: [n]
  additionalProperties: false

# CEL expressions (https://cel.dev) over params: the state before the first step,
# and the most steps a job may take.
initial: '{"count": 0}'
max_steps: params.n

# The step's messages, Go text/template over .state and .params: only what the step
# needs, never the job's history.
prompt:
  system: |-
    You count upwards by one. Answer with one JSON object: {"next": <the next number>}.
  user: |-
    The count is {{.state.count}}. What comes next?

# How a reply is read, strictly: the reply's last JSON object, which must satisfy this
# schema; anything else is a red flag (thrown away, never repaired).
answer:
  format: json
  schema:
    type: object
    properties:
      next: {type: integer}
    required: [next]

# The answer fields that form the vote (default: the whole answer).
vote: [next]

# The next state from the winning answer (an expression over state, answer, params),
# or "field: <answer field>" when the answer carries the next state itself.
next:
  expr: '{"count": answer.next}'

# When the job is done, over state and params.
done: state.count == params.n

# Replies that parse but must not be votes: each rejects a reply when it is true.
red_flags:
  - name: went_backwards
    when: answer.next <= state.count

# The right answer for a state (optional): the verifier counts decided steps that
# differ, and maker task test's simulated model answers from it.
reference: '{"next": state.count + 1}'

# How far along a state is, in [0, 1] (optional).
progress: double(state.count) / double(params.n)
`
