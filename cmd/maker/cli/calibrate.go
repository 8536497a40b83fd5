package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/calibrate"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
)

// errCannotJudge is the usage error of a task calibration cannot judge.
const errCannotJudge = "calibration needs a task that can judge answers: hanoi, or a spec with a reference"

// calibrateCmd is `maker calibrate` and `maker calibrate show`.
func calibrateCmd(e *env) *cobra.Command {
	var (
		jf                                       jobFlags // task, params, disks, seed
		sf                                       simFlags
		taskFile, model, llmURL, apiKey, natsURL string
		samples, concurrency, maxOutputTokens    int
		confidence, temperature                  float64
		asJSON, noStore, llmStream, quiet        bool
	)
	cmd := &cobra.Command{
		Use:   "calibrate --model M [--task T --params P] [--samples N]",
		Short: "Measure a model on a task (p, valid fraction, tokens per call, with confidence intervals) and store it for plan and forecasts",
		Long: `calibrate measures a model the way the MAKER paper did before choosing k: it draws
--samples steps at random along the task's right path, asks the model once per step at
--temperature (0.1, the temperature of a step's later votes), judges every reply exactly
as a voter does (red flags: finish_reason length, more than --max-output-tokens tokens,
the task's strict parser) and compares each vote with the task's reference answer.

It prints p (the chance a valid sample is right), the valid fraction (the share that
survives red-flagging) and the tokens of a call, each with its exact Clopper-Pearson
interval at --confidence, and stores the result in the fleet's maker_calibrations bucket
under task, model and prompt version (writing needs the admin identity; --no-store skips
it). maker plan, run and submit then take p, the valid fraction and the tokens per call
from it when --p is not given.

The task must know its right answers: hanoi, or a task spec with a reference. Without
--llm-base-url the simulated model answers, in this process (--sim-* flags).`,
		Example: `  maker calibrate --task hanoi --params '{"disks":10}' --model sim-1 --sim-accuracy 0.998 --samples 2000 --json
  maker calibrate --task-file examples/tasks/multiply.yaml --params '{"a":"1234","b":"5678"}' --model sim-1 --no-store
  maker calibrate --params '{"disks":20}' --llm-base-url https://api.openai.com/v1 --model gpt-4.1-mini --samples 1000
  maker calibrate show --model gpt-4.1-mini`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			if fl.NFlag() == 0 {
				return cmd.Help() // as a command group: it has show
			}
			switch {
			case samples < 1 || samples > schemas.MaxCalibrationSamples:
				return usagef("--samples %d must be between 1 and %d", samples, schemas.MaxCalibrationSamples)
			case !(confidence > 0 && confidence < 1):
				return usagef("--confidence %v must be in (0, 1), e.g. 0.95", confidence)
			case concurrency < 1 || concurrency > 10_000:
				return usagef("--concurrency %d must be between 1 and 10000", concurrency)
			case !(temperature >= 0 && temperature <= 2):
				return usagef("--temperature %v must be between 0 and 2", temperature)
			case maxOutputTokens < 1:
				return usagef("--max-output-tokens %d must be >= 1", maxOutputTokens)
			}
			if strings.TrimSpace(model) == "" {
				return usagef("--model is required: the model to measure (the simulated model answers to any name, e.g. sim-1)")
			}
			sim := llmURL == ""
			if !sim {
				var given []string
				fl.Visit(func(f *pflag.Flag) {
					if strings.HasPrefix(f.Name, "sim-") {
						given = append(given, "--"+f.Name)
					}
				})
				if len(given) > 0 {
					return usagef("%s: the simulated model's flags, with --llm-base-url (a real model)", strings.Join(given, ", "))
				}
			}
			ctx := cmd.Context()
			ref, inst, tasks, closeTasks, err := calibrationTask(ctx, cmd, &jf, taskFile, natsURL)
			if err != nil {
				return err
			}
			defer closeTasks()
			// Refused before anything is asked of a model.
			if err := canJudge(inst); err != nil {
				return err
			}
			// Storing: the admin's write; a store that cannot be reached is
			// said at once, and the measurement goes on.
			var kv jetstream.KeyValue
			if !noStore {
				id := natsAuth(ctx).IdentityName()
				if id != "" && id != auth.Admin {
					return usagef("storing a calibration needs the %s identity (NATS identity %s may only read them); give --no-store to measure only", auth.Admin, id)
				}
				var closeNC func()
				kv, closeNC, err = calibrationStore(ctx, natsURL, true)
				if err != nil {
					fmt.Fprintf(e.stderr, "maker: not storing the calibration: %v; give --nats URL of the fleet to store it, or --no-store to measure only\n", err)
				} else {
					defer closeNC()
				}
			}
			var m calibrate.Model
			if sim {
				simCfg, err := sf.config(jf.seed)
				if err != nil {
					return err
				}
				simCfg.Tasks = tasks
				c, stop, err := simClient(ctx, simCfg, model, sf.http)
				if err != nil {
					return err
				}
				defer stop()
				m = c
			} else {
				if apiKey == "" {
					apiKey = apiKeyFromEnv()
				}
				c, err := llm.New(llm.Config{BaseURL: llmURL, APIKey: apiKey, Model: model, Stream: llmStream})
				if err != nil {
					return usageError{err}
				}
				defer c.Close()
				m = c
			}
			temp := temperature
			cfg := calibrate.Config{
				Task: ref, Model: model, Samples: samples, Seed: jf.seed, Temperature: &temp,
				MaxOutputTokens: maxOutputTokens, Confidence: confidence, Concurrency: concurrency, SimHints: sim,
			}
			if !quiet {
				cfg.Progress = progressEvery(e.stderr, samples, 2*time.Second)
			}
			c, err := calibrate.Run(ctx, inst, m, cfg)
			if errors.Is(err, calibrate.ErrCannotJudge) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if asJSON {
				err = writeJSON(e.stdout, c)
			} else {
				err = printCalibration(e.stdout, c)
			}
			if err != nil || kv == nil {
				return err
			}
			if err := calibrate.Put(ctx, kv, c); err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "stored in %s as %s\n", kv.Bucket(), calibrate.Key(c.Task, c.Model, c.PromptVersion))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&jf.task, "task", "hanoi", "task to measure on: a built-in one, or a registered task spec as NAME or NAME@VERSION")
	fl.StringVar(&taskFile, "task-file", "", "measure on the task spec in FILE (YAML or JSON) instead of --task")
	fl.StringVar(&jf.params, "params", "", `task params as JSON, e.g. '{"disks":10}', or @FILE (hanoi default: --disks)`)
	fl.StringArrayVar(&jf.paramsJSONL, "params-jsonl", nil, "FIELD=FILE: set params field FIELD to the JSON values in FILE, one a line (JSON Lines); repeatable")
	fl.IntVar(&jf.disks, "disks", 10, "hanoi: number of disks when --params is not given")
	fl.StringVar(&model, "model", envOr("MAKER_MODEL", ""), "model to measure (required; the simulated model answers to any name, e.g. sim-1) [$MAKER_MODEL]")
	fl.IntVar(&samples, "samples", calibrate.DefaultSamples, "steps drawn, one sample each (1 to 1000000)")
	fl.Int64Var(&jf.seed, "seed", 1, "seed of the steps drawn and of every sample")
	fl.Float64Var(&confidence, "confidence", calibrate.DefaultConfidence, "level of the Clopper-Pearson intervals, in (0, 1)")
	fl.IntVar(&concurrency, "concurrency", calibrate.DefaultConcurrency, "model calls in flight at once")
	fl.Float64Var(&temperature, "temperature", calibrate.DefaultTemperature, "temperature of every sample (the paper's calibration: 0.1, that of a step's later votes)")
	fl.IntVar(&maxOutputTokens, "max-output-tokens", schemas.DefaultMaxOutputTokens, "red flag: replies longer than this many tokens (as a job's)")
	fl.BoolVar(&asJSON, "json", false, "print the calibration as JSON")
	fl.BoolVar(&noStore, "no-store", false, "measure only: do not store the calibration")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress")
	fl.StringVar(&llmURL, "llm-base-url", envOr("MAKER_LLM_BASE_URL", ""), "OpenAI-compatible base URL of the model (default: the simulated model) [$MAKER_LLM_BASE_URL]")
	fl.StringVar(&apiKey, "api-key", "", "model API key (default $MAKER_LLM_API_KEY or $OPENAI_API_KEY)")
	fl.BoolVar(&llmStream, "llm-stream", false, "ask the model for streamed replies (stream: true, usage in the last chunk)")
	natsFlag(cmd, &natsURL)
	addSimFlags(cmd, &sf)
	cmd.AddCommand(calibrateShowCmd(e))
	return cmd
}

// calibrationTask finds --task (or --task-file) and binds the params: a
// built-in task, the spec in the file, or a spec registered with the fleet
// at natsURL. The registry returned serves the simulated model until done
// is called.
func calibrationTask(ctx context.Context, cmd *cobra.Command, jf *jobFlags, taskFile, natsURL string) (
	ref task.Ref, inst task.Instance, tasks *taskreg.Registry, done func(), err error,
) {
	done = func() {}
	fail := func(err error) (task.Ref, task.Instance, *taskreg.Registry, func(), error) {
		done()
		return task.Ref{}, nil, nil, nil, err
	}
	tasks, _, err = taskFileFlag(cmd, jf, taskFile)
	if err != nil {
		return fail(err)
	}
	name, version, err := taskreg.ParseRef(jf.task)
	if err != nil {
		return fail(usageError{err})
	}
	ref, err = tasks.Resolve(ctx, name, version)
	if err != nil && taskFile == "" {
		if _, berr := builtin.Registry().Lookup(name); berr != nil {
			// Not a built-in: perhaps a spec registered with the fleet.
			f, derr := dialFleet(ctx, natsURL, "maker-calibrate")
			if derr != nil {
				return fail(usagef("unknown task %q: no built-in task has that name (%s), and the fleet's task registry cannot be read to look for a spec (%v); give --task-file FILE",
					jf.task, strings.Join(builtin.Registry().Names(), ", "), derr))
			}
			done = f.Close
			tasks = taskreg.New(f.topo.Tasks, builtin.Registry(), taskspec.CompileSpec)
			ref, err = tasks.Resolve(ctx, name, version)
		}
	}
	if err != nil {
		return fail(usageError{err})
	}
	params, err := jf.paramsFor(ref)
	if err != nil {
		return fail(err)
	}
	if inst, err = task.BindRef(ctx, tasks, ref, params); err != nil {
		return fail(usageError{err})
	}
	return ref, inst, tasks, done, nil
}

// canJudge refuses an instance calibration cannot judge samples of.
func canJudge(inst task.Instance) error {
	d, ok := inst.(task.Drawer)
	if _, isRef := inst.(task.Referencer); !ok || !isRef {
		return usagef("%s (this task has no reference answer)", errCannotJudge)
	}
	if _, _, err := d.DrawState(rand.New(rand.NewPCG(0, 0))); errors.Is(err, task.ErrNoReference) {
		return usagef("%s: %v", errCannotJudge, err)
	} else if err != nil {
		return usageError{err}
	}
	return nil
}

// simClient is the simulated model, in this process (or on a loopback
// port with --sim-http), behind the client the voters use.
func simClient(ctx context.Context, cfg simllm.Config, model string, overHTTP bool) (*llm.Client, func(), error) {
	var (
		hc   *http.Client
		url  = "http://simllm.in-process/v1"
		stop = func() {}
	)
	if overHTTP {
		rn, err := simllm.Start(ctx, "127.0.0.1:0", cfg)
		if err != nil {
			return nil, nil, usageError{err}
		}
		url = rn.URL()
		stop = func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = rn.Close(cctx)
		}
	} else {
		sim, err := simllm.New(cfg)
		if err != nil {
			return nil, nil, usageError{err}
		}
		hc = &http.Client{Transport: sim.Transport()}
	}
	c, err := llm.New(llm.Config{BaseURL: url, Model: model, HTTPClient: hc})
	if err != nil {
		stop()
		return nil, nil, usageError{err}
	}
	return c, func() { c.Close(); stop() }, nil
}

// calibrationStore opens the calibrations bucket on the NATS server at
// natsURL (made when missing, with create); done closes the connection.
func calibrationStore(ctx context.Context, natsURL string, create bool) (kv jetstream.KeyValue, done func(), err error) {
	js, closeNC, err := connectJS(natsURL, "maker-calibrate", natsAuth(ctx))
	if err != nil {
		return nil, nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err = calibrate.OpenBucket(octx, js, bus.DefaultNamespace, create)
	if err != nil {
		closeNC()
		return nil, nil, err
	}
	return kv, closeNC, nil
}

// progressEvery returns a Progress callback writing "n/total samples" to
// w at most every interval, and at the end.
func progressEvery(w io.Writer, total int, interval time.Duration) func(int) {
	var (
		mu   sync.Mutex
		last = time.Now()
	)
	return func(done int) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(last) >= interval || done == total {
			last = now
			fmt.Fprintf(w, "calibrate: %d/%d samples\n", done, total)
		}
	}
}

// printCalibration writes c as a short table.
func printCalibration(w io.Writer, c schemas.Calibration) error {
	name := c.Task
	if c.TaskVersion != "" {
		name += "@" + c.TaskVersion
	}
	fmt.Fprintf(w, "calibration of %s on %s %s   prompt %s\n", c.Model, name, clipText(string(c.Params), 200), c.PromptVersion)
	fmt.Fprintf(w, "  %d samples at temperature %g, max %d output tokens, seed %d; intervals: %g %% %s\n",
		c.Samples, c.Temperature, c.MaxOutputTokens, c.Seed, 100*c.Confidence, c.Method)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  p (a valid sample is right)\t%.4f\t[%.4f, %.4f]\t%d of %d valid\n", c.P, c.PLow, c.PHigh, c.Right, c.Valid)
	fmt.Fprintf(tw, "  valid fraction\t%.4f\t[%.4f, %.4f]\t%d of %d samples; red flags: %s\n",
		c.ValidFraction, c.ValidLow, c.ValidHigh, c.Valid, c.Samples, redFlagList(c.RedFlags))
	fmt.Fprintf(tw, "  tokens per call\t%.1f\t\tprompt %.1f, completion %.1f\n", c.TokensPerCall, c.PromptTokensMean, c.CompletionTokensMean)
	if c.Failed > 0 {
		fmt.Fprintf(tw, "  failed calls\t%d\t\tnot counted as samples\n", c.Failed)
	}
	return tw.Flush()
}

func redFlagList(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	s := strings.TrimPrefix(redFlagBreakdown(m), " (")
	return strings.TrimSuffix(s, ")")
}

// calibrateShowCmd is `maker calibrate show`.
func calibrateShowCmd(e *env) *cobra.Command {
	var (
		natsURL, taskName, model string
		asJSON                   bool
	)
	cmd := &cobra.Command{
		Use:   "show [--task T] [--model M]",
		Short: "List the stored calibrations (of --task, of --model)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			kv, done, err := calibrationStore(ctx, natsURL, false)
			var list []schemas.Calibration
			switch {
			case errors.Is(err, calibrate.ErrNotFound): // none stored yet
				err = nil
			case err != nil:
				return err
			default:
				defer done()
				if list, err = calibrate.List(ctx, kv); err != nil {
					fmt.Fprintf(e.stderr, "maker: %v\n", err)
				}
			}
			list = slices.DeleteFunc(list, func(c schemas.Calibration) bool {
				return taskName != "" && c.Task != taskName || model != "" && c.Model != model
			})
			if asJSON {
				if list == nil {
					list = []schemas.Calibration{}
				}
				if werr := writeJSON(e.stdout, list); werr != nil {
					return werr
				}
				return err
			}
			if len(list) == 0 {
				fmt.Fprintln(e.stdout, "no calibrations stored (maker calibrate measures one)")
				return err
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TASK\tMODEL\tPROMPT\tP\tINTERVAL\tVALID\tTOKENS/CALL\tSAMPLES\tMEASURED")
			for _, c := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.4f\t[%.4f, %.4f] %g%%\t%.4f\t%.0f\t%d\t%s\n", c.Task, clipText(c.Model, 60), c.PromptVersion,
					c.P, c.PLow, c.PHigh, 100*c.Confidence, c.ValidFraction, c.TokensPerCall, c.Samples, c.MeasuredAt.Format(time.DateOnly))
			}
			if ferr := tw.Flush(); ferr != nil {
				return ferr
			}
			return err
		},
	}
	natsFlag(cmd, &natsURL)
	cmd.Flags().StringVar(&taskName, "task", "", "only this task's")
	cmd.Flags().StringVar(&model, "model", "", "only this model's")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// calibrationFlags find the stored calibration plan takes p from.
type calibrationFlags struct {
	model, task, promptVersion, natsURL string
}

func (f *calibrationFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "without --p: take p, the valid fraction and the tokens per call from this model's stored calibration (maker calibrate)")
	fl.StringVar(&f.task, "task", "hanoi", "with --model: the task the calibration measured")
	fl.StringVar(&f.promptVersion, "prompt-version", "", "with --model: the calibration's prompt version (default: a built-in task's current prompt; for a task spec the newest calibration)")
	natsFlag(cmd, &f.natsURL)
}

// lookup finds the calibration of f.model on f.task: for the prompt
// version given, else a built-in task's current one (hanoi's is the same
// for every disk count), else the newest stored for the model and task.
func (f *calibrationFlags) lookup(ctx context.Context, disks int) (schemas.Calibration, error) {
	version := f.promptVersion
	if version == "" {
		if _, err := builtin.Registry().Lookup(f.task); err == nil {
			params := "{}"
			if f.task == "hanoi" {
				params = fmt.Sprintf(`{"disks":%d}`, max(disks, 1))
			}
			inst, err := builtin.Registry().Bind(f.task, []byte(params))
			if err != nil {
				return schemas.Calibration{}, usageError{err}
			}
			version = calibrate.PromptVersion(task.Ref{Name: f.task}, inst)
		}
	}
	kv, done, err := calibrationStore(ctx, f.natsURL, false)
	if errors.Is(err, calibrate.ErrNotFound) {
		return schemas.Calibration{}, usagef("no calibration is stored on %s: measure one with maker calibrate --model %s, or give --p", bus.RedactURL(f.natsURL), f.model)
	}
	if err != nil {
		return schemas.Calibration{}, fmt.Errorf("reading the stored calibrations (give --p to plan without): %w", err)
	}
	defer done()
	c, err := calibrate.Find(ctx, kv, f.task, f.model, version)
	if errors.Is(err, calibrate.ErrNotFound) {
		return c, usagef("no calibration of %s on %s (%v): measure one with maker calibrate --task %s --model %s, give --prompt-version for another prompt's, or give --p",
			clipText(f.model, 60), f.task, err, f.task, clipText(f.model, 60))
	}
	return c, err
}

// storedCalibration is a jobFlags.calibrated that finds, on the NATS
// server at natsURL, model's calibration of the job's task with the task's
// current prompt; none without a model, a server or a calibration with
// votes.
func storedCalibration(natsURL, model string) func(context.Context, task.Ref, task.Instance) (schemas.Calibration, bool) {
	if strings.TrimSpace(model) == "" {
		return nil
	}
	return func(ctx context.Context, ref task.Ref, inst task.Instance) (schemas.Calibration, bool) {
		kv, done, err := calibrationStore(ctx, natsURL, false)
		if err != nil {
			return schemas.Calibration{}, false
		}
		defer done()
		c, err := calibrate.Lookup(ctx, kv, ref.Name, model, calibrate.PromptVersion(ref, inst))
		return c, err == nil && c.Valid > 0
	}
}

// notePFrom says on w where a job's p came from when a stored calibration
// gave it.
func notePFrom(w io.Writer, jf *jobFlags, spec schemas.JobSpec) {
	if strings.HasPrefix(jf.pFrom, "calibration ") {
		fmt.Fprintf(w, "p %.4g and valid fraction %.4g from %s\n", spec.PEstimate, spec.ValidFraction, jf.pFrom)
	}
}
