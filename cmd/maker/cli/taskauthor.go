package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	"github.com/makerfleet/makerfleet/task/spec"
)

// stepFlags pick a spec's step for render and check: params, and the step
// along the reference (--step) or a state given outright (--state).
type stepFlags struct {
	pf    jobFlags // only its params
	step  int64
	state string
}

func addStepFlags(cmd *cobra.Command, f *stepFlags) {
	cmd.Flags().StringVar(&f.pf.params, "params", "", "the job's params as JSON, or @FILE (required)")
	cmd.Flags().StringArrayVar(&f.pf.paramsJSONL, "params-jsonl", nil, "add a params field holding a JSON Lines file's values, FIELD=FILE (repeatable)")
	cmd.Flags().Int64Var(&f.step, "step", 0, "the step: the state the reference answers reach after this many steps")
	cmd.Flags().StringVar(&f.state, "state", "", "the step's state as JSON, or @FILE, instead of --step")
}

// instance compiles the spec in file, binds the params and finds the
// step's state.
func (f *stepFlags) instance(cmd *cobra.Command, file string) (*spec.Instance, task.State, error) {
	if f.pf.params == "" && len(f.pf.paramsJSONL) == 0 {
		return nil, nil, usagef("--params is required: the job's params as JSON, or @FILE")
	}
	if f.state != "" && cmd.Flags().Changed("step") {
		return nil, nil, usagef("give --step or --state, not both")
	}
	if f.step < 0 {
		return nil, nil, usagef("--step must be >= 0")
	}
	_, t, err := readSpec(file)
	if err != nil {
		return nil, nil, err
	}
	params, err := f.pf.paramsFor(task.Ref{Name: t.Name(), Version: t.Version()})
	if err != nil {
		return nil, nil, err
	}
	bound, err := t.Bind(params)
	if err != nil {
		return nil, nil, usageError{err}
	}
	in := bound.(*spec.Instance)
	if f.state == "" {
		s, err := in.StateAt(f.step)
		if err != nil {
			return nil, nil, usagef("%s: %v (give the state with --state)", file, err)
		}
		return in, s, nil
	}
	raw := f.state
	if name, ok := strings.CutPrefix(raw, "@"); ok {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, nil, usagef("--state %s: %v", raw, err)
		}
		raw = string(data)
	}
	s, err := in.CanonicalState([]byte(raw))
	if err != nil {
		return nil, nil, usagef("--state: %v", err)
	}
	return in, s, nil
}

// taskRenderCmd is maker task render: the prompt a voter sends for a step.
func taskRenderCmd(e *env) *cobra.Command {
	var (
		f      stepFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "render FILE --params JSON [--step N | --state JSON]",
		Short: "Print the prompt a voter would send for a step of a task spec",
		Long: `render prints the messages a voter sends the model for one step of the spec in
FILE: the system and user prompts written from the params and the step's state. The
state is the one the spec's reference answers reach after --step steps (0: the
initial state), or the one --state gives.`,
		Example: `  maker task render examples/tasks/multiply.yaml --params '{"a": "1234", "b": "567"}' --step 5`,
		Args:    exactArgs(1, "FILE (a task spec)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, s, err := f.instance(cmd, args[0])
			if err != nil {
				return err
			}
			msgs, err := in.Prompt(s)
			if err != nil {
				return usagef("%s: prompt: %v", args[0], err)
			}
			if asJSON {
				out := make([]map[string]string, len(msgs))
				for i, m := range msgs {
					out[i] = map[string]string{"role": m.Role, "content": m.Content}
				}
				return writeJSON(e.stdout, map[string]any{"state": s, "messages": out})
			}
			fmt.Fprintf(e.stdout, "state: %s\n", s)
			for _, m := range msgs {
				fmt.Fprintf(e.stdout, "\n--- %s ---\n%s\n", m.Role, m.Content)
			}
			return nil
		},
	}
	addStepFlags(cmd, &f)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// taskCheckCmd is maker task check: a reply read as the fleet reads it.
func taskCheckCmd(e *env) *cobra.Command {
	var (
		f      stepFlags
		reply  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "check FILE --params JSON [--step N | --state JSON] --reply TEXT",
		Short: "Read a model's reply to a step of a task spec as the fleet would: parse, red flags, vote, next state",
		Long: `check reads --reply (text, or @FILE) as a voter and a coordinator read a model's
reply to the step: the answer it parses to (or the red flag that throws it away, and
why), its vote, whether it is the reference's answer, and the next state it leads
to. Exit 0 for a vote, 1 for a red flag.`,
		Example: `  maker task check examples/tasks/classify.yaml --params @examples/tasks/classify.params.json --step 2 --reply '{"label": "neutral"}'`,
		Args:    exactArgs(1, "FILE (a task spec)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("reply") {
				return usagef("--reply is required: the model's reply, or @FILE")
			}
			if name, ok := strings.CutPrefix(reply, "@"); ok {
				data, err := os.ReadFile(name)
				if err != nil {
					return usagef("--reply %s: %v", reply, err)
				}
				reply = string(data)
			}
			in, s, err := f.instance(cmd, args[0])
			if err != nil {
				return err
			}
			out := map[string]any{"state": s}
			v, perr := in.Parse(s, reply)
			var rf *task.RedFlag
			switch {
			case errors.As(perr, &rf):
				out["red_flag"], out["detail"] = rf.Reason, rf.Detail
			case perr != nil:
				out["red_flag"], out["detail"] = "parse", perr.Error()
			default:
				out["vote"] = v.Key
				if ref, err := in.ReferenceVote(s); err == nil {
					out["right"] = ref.Key == v.Key
					out["reference"] = ref.Key
				}
				next, err := in.Next(s, v)
				if err != nil {
					out["next_error"] = err.Error()
				} else {
					out["next_state"] = next
				}
			}
			if asJSON {
				if err := writeJSON(e.stdout, out); err != nil {
					return err
				}
			} else {
				printCheck(e, out)
			}
			if perr != nil {
				return fmt.Errorf("the reply is red-flagged (%s): it would not be a vote", out["red_flag"])
			}
			if ne, ok := out["next_error"]; ok {
				return fmt.Errorf("the task cannot move on from this vote: %s", ne)
			}
			return nil
		},
	}
	addStepFlags(cmd, &f)
	cmd.Flags().StringVar(&reply, "reply", "", "the model's reply, or @FILE (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printCheck(e *env, out map[string]any) {
	fmt.Fprintf(e.stdout, "state       %s\n", out["state"])
	if rf, ok := out["red_flag"]; ok {
		fmt.Fprintf(e.stdout, "red flag    %s: %s\n", rf, out["detail"])
		return
	}
	fmt.Fprintf(e.stdout, "vote        %s\n", out["vote"])
	if right, ok := out["right"].(bool); ok {
		verdict := "right (the reference's answer)"
		if !right {
			verdict = fmt.Sprintf("wrong: the reference answers %s", out["reference"])
		}
		fmt.Fprintf(e.stdout, "verdict     %s\n", verdict)
	}
	if ne, ok := out["next_error"]; ok {
		fmt.Fprintf(e.stdout, "next state  (fails) %s\n", ne)
		return
	}
	fmt.Fprintf(e.stdout, "next state  %s\n", out["next_state"])
}

// taskDeleteCmd is maker task delete: a registered version removed,
// unless a job not finished pins it.
func taskDeleteCmd(e *env) *cobra.Command {
	var natsURL string
	cmd := &cobra.Command{
		Use:   "delete NAME@VERSION",
		Short: "Remove a registered task spec version (refused while a job not finished pins it)",
		Long: `delete removes NAME@VERSION from the fleet's task registry. It is refused while a
job that pinned it (queued, running or paused) has not finished; finished jobs keep
their reports, which name the version and content hash that ran. The version may be
registered again later: jobs pin the content hash, so nothing runs a spec it did not
pin.`,
		Args: exactArgs(1, "NAME@VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, version, err := taskreg.ParseRef(args[0])
			if err != nil {
				return usageError{err}
			}
			if version == "" {
				return usagef("name the version to delete: %s@VERSION", name)
			}
			ctx := cmd.Context()
			nc, err := bus.Connect(natsURL, "maker-task", natsAuth(ctx))
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			topo, err := topology.Open(ctx, js, topology.Config{StartupWait: 10 * time.Second})
			if err != nil {
				return fmt.Errorf("%s: %w", bus.RedactURL(natsURL), err)
			}
			reg := taskreg.New(topo.Tasks, builtin.Registry(), spec.CompileSpec)
			inUse := func(ctx context.Context, hash string) (string, error) {
				recs, err := jobs.List(ctx, topo, "")
				if err != nil {
					return "", err
				}
				for _, r := range recs {
					if !r.Finished && r.Spec.TaskHash == hash {
						return r.Tenant + "/" + r.JobID, nil
					}
				}
				return "", nil
			}
			switch err := reg.Delete(ctx, name, version, inUse); {
			case errors.Is(err, taskreg.ErrNotFound), errors.Is(err, taskreg.ErrInUse):
				return usageError{err}
			case err != nil:
				return err
			}
			fmt.Fprintf(e.stdout, "deleted %s@%s\n", name, version)
			return nil
		},
	}
	natsFlag(cmd, &natsURL)
	return cmd
}
