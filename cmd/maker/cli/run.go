package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/builtin"
	"github.com/makerfleet/makerfleet/task/spec"
)

func runCmd(e *env) *cobra.Command {
	var (
		jf       jobFlags
		sf       simFlags
		svc      serviceFlags
		asJSON   bool
		quiet    bool
		timeout  time.Duration
		taskFile string
		procs    int
		keep     bool
		x        runExtras
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run one job on a whole fleet inside this process (embedded NATS, Redis and simulated model unless given)",
		Long: `run starts a complete fleet in this process — coordinator, voter, and, unless their
URLs are given, an embedded nats-server, an embedded Redis-compatible store and the
simulated model — submits one job, shows its progress and prints its report.
The embedded nats-server keeps its store (the job's journal, which grows about
0.7 KB a step) in a new directory under the system temp dir, removed at the end
unless --keep (or in --data-dir); its sample and result queues are in memory.
Redis is a redis-server started on a free port when one is installed, else miniredis.
With --timeout the job is cancelled when the time is up: its partial report
(state cancelled) is printed and maker exits 124.

With the simulated model, --seed seeds both the job and the model, and k defaults to
the smallest margin that reaches --target at p = --sim-accuracy.`,
		Example: `  maker run --task hanoi --disks 10
  maker run --task-file examples/tasks/multiply.yaml --params '{"a": "1234", "b": "5678"}'
  maker run --disks 12 --k 4 --sim-accuracy 0.9 --json
  maker run --disks 5 --llm-base-url http://localhost:8000/v1 --model my-model --p 0.99`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := jf.checkTemperatures(); err != nil {
				return err
			}
			simCfg, err := sf.config(jf.seed)
			if err != nil {
				return err
			}
			p, valid := 0.0, 1.0
			if svc.llmBaseURL == "" {
				p = simCfg.EffectiveAccuracy(jf.tempRest)
				valid = 1 - sf.malformed - sf.overlong
				if p >= 1 {
					p = 0 // a perfect model: no estimate; k must be given or defaults below
					if !cmd.Flags().Changed("k") && !cmd.Flags().Changed("p") {
						jf.k = 1
						_ = cmd.Flags().Set("k", "1")
					}
				}
			} else if !cmd.Flags().Changed("p") {
				p = 0.99
			}
			tasks, src, err := taskFileFlag(cmd, &jf, taskFile)
			if err != nil {
				return err
			}
			if svc.llmBaseURL != "" && svc.nats != "" {
				// A real model and a fleet's NATS: the model's stored
				// calibration (maker calibrate) gives p, if there is one.
				jf.calibrated = storedCalibration(svc.nats, svc.model)
			}
			spec, inst, err := jf.spec(cmd, p, fmt.Sprintf("the simulated model's accuracy at temperature %g (--sim-accuracy)", jf.tempRest), valid, tasks)
			if err != nil {
				return err
			}
			notePFrom(e.stderr, &jf, spec)
			if svc.llmBaseURL == "" {
				noteNoWrong(e.stderr, inst, p)
			}
			log := e.logger(slog.LevelWarn)
			opts, err := svc.options(simCfg, log)
			if err != nil {
				return err
			}
			opts.simHTTP = sf.http
			// Its own fleet: the job's prices are the operator's, and a
			// budget needs them (the fleet would pause the job for good).
			opts.prices = jobPrices(&spec)
			if err := pricing.Check(pricing.NewTable(opts.prices), &spec, 0); err != nil {
				return usagef("--budget-usd needs --input-price and --output-price (maker run's fleet prices its job by them): %v", err)
			}
			if procs < 0 {
				return usagef("--gomaxprocs must be >= 0")
			}
			if procs > 0 {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			}
			if timeout < 0 {
				return usagef("--timeout must be >= 0")
			}
			x.timeout, x.mem = timeout, e.stderr
			// The fleet's own servers: Redis a redis-server when one is
			// installed (miniredis is about half as fast), the work queues
			// in memory, the journal on a disk.
			opts.redisServer = svc.redis == ""
			if svc.nats == "" {
				opts.ownServer = true
				dir, cleanup, err := runStoreDir(svc.dataDir, keep, e.stderr)
				if err != nil {
					return err
				}
				defer cleanup()
				opts.dataDir = dir
			}
			rep, err := runJobX(cmd.Context(), opts, &spec, src, progressFor(e.stderr, quiet), x)
			var timedOut errTimedOut
			if err != nil && !errors.As(err, &timedOut) {
				return err
			}
			if perr := printReport(e.stdout, rep, asJSON); perr != nil {
				return perr
			}
			return err
		},
	}
	addJobFlags(cmd, &jf, "the simulated model's accuracy, or 0.99 with --llm-base-url")
	addSimFlags(cmd, &sf)
	addServiceFlags(cmd, &svc)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "cancel the job after this long, print its partial report and exit 124 (default: no limit)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the embedded nats-server's store (the job's journal) instead of removing it at the end")
	cmd.Flags().StringVar(&x.traceFile, "trace-file", "", "write the decided trace to FILE: each step's winning vote key on a line, in step order (what trace_sha256 hashes)")
	cmd.Flags().StringVar(&x.cpuProfile, "cpuprofile", "", "write a CPU profile of the job to FILE")
	cmd.Flags().StringVar(&x.memProfile, "memprofile", "", "write a heap profile at the job's end to FILE (and with --mem-every, one at each sample to FILE.<step>)")
	cmd.Flags().Int64Var(&x.memEvery, "mem-every", 0, "every N decided steps, print this process's RSS, Go heap and store size to stderr, and their growth per 1,000 steps at the end")
	// The runtime's default: with a wave in one request and its answers
	// in one message, a job's coordinator, voter and model keep a second
	// CPU busy (14 disks on 2 CPUs: about 1,650 steps/s against 1,100 at
	// 1; docs/benchmarks.md "Third pass").
	cmd.Flags().IntVar(&procs, "gomaxprocs", 0, "GOMAXPROCS for the in-process fleet (0: the runtime's default, one thread a CPU)")
	cmd.Flags().Lookup("redis").Usage = "Redis URL, any form maker coordinator takes (default: a redis-server started on a free port; miniredis when none is installed) [$MAKER_REDIS_URL]"
	cmd.Flags().Lookup("data-dir").Usage = "embedded nats-server data dir, kept (default: a new dir under the system temp dir, removed at the end unless --keep)"
	cmd.Flags().StringVar(&taskFile, "task-file", "", "run the task spec in FILE (YAML or JSON; see docs/tasks.md) instead of --task")
	tracingFlags(e, cmd, "run")
	return cmd
}

// taskFileFlag compiles --task-file, when given, and returns the tasks a
// job may name (the built-ins, and that spec) and the spec's source (nil
// without one). The job's task becomes the spec's.
func taskFileFlag(cmd *cobra.Command, jf *jobFlags, file string) (*taskreg.Registry, []byte, error) {
	tasks := builtinTasks()
	if file == "" {
		return tasks, nil, nil
	}
	if cmd.Flags().Changed("task") {
		return nil, nil, usagef("give --task or --task-file, not both")
	}
	src, t, err := readSpec(file)
	if err != nil {
		return nil, nil, err
	}
	tasks.Add(t)
	jf.task = t.Name() + "@" + t.Version()
	return tasks, src, nil
}

// readSpec reads and compiles a task spec file; an invalid one is a usage
// error listing every problem, and so is one named like a built-in task.
func readSpec(file string) ([]byte, *spec.Task, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, usagef("task spec: %v", err)
	}
	t, err := spec.Compile(src)
	if err != nil {
		return nil, nil, usagef("%s: %w", file, err)
	}
	if msg := builtinName(t.Name()); msg != "" {
		return nil, nil, usagef("%s: name: %s", file, msg)
	}
	return src, t, nil
}

// builtinName says why a spec named like a built-in task cannot be used
// (no fleet registers it, so no job runs it); "" for any other name.
func builtinName(name string) string {
	if name == "" {
		return ""
	}
	if _, err := builtin.Registry().Lookup(name); err != nil {
		return ""
	}
	return fmt.Sprintf("%q is a built-in task's name; give the spec another name", name)
}

// runJob starts an in-process fleet, registers the task spec src (if any)
// with it, submits spec and waits for its report.
func runJob(ctx context.Context, opts fleetOptions, spec *schemas.JobSpec, src []byte, onStatus func(schemas.JobStatus)) (schemas.JobReport, error) {
	return runJobX(ctx, opts, spec, src, onStatus, runExtras{})
}

// runJobX is runJob with maker run's options for long jobs (runlong.go).
func runJobX(ctx context.Context, opts fleetOptions, job *schemas.JobSpec, src []byte, onStatus func(schemas.JobStatus), x runExtras) (schemas.JobReport, error) {
	deadline := time.Now().Add(x.timeout)
	mw := newMemWatch(x.memEvery, x.mem, opts.dataDir, x.memProfile)
	f, err := startFleet(ctx, opts)
	if err != nil {
		return schemas.JobReport{}, err
	}
	defer f.Close()
	if src != nil {
		if _, _, err := f.Registry.Register(ctx, src, "maker run"); err != nil {
			return schemas.JobReport{}, err
		}
	}
	if _, err := jobs.Submit(ctx, f.JS, f.Bus, job, builtin.Registry(), jobs.Compile(spec.CompileSpec)); err != nil {
		return schemas.JobReport{}, err
	}
	stopProfile, err := x.profile()
	if err != nil {
		return schemas.JobReport{}, err
	}
	rep, err := waitOrCancel(ctx, f, job, deadline, x, mw.onStatus(onStatus))
	mw.summary(rep.Steps)
	if perr := stopProfile(); perr != nil {
		return rep, perr
	}
	var timedOut errTimedOut
	if x.traceFile != "" && (err == nil || errors.As(err, &timedOut)) {
		if terr := writeTrace(ctx, f, rep, x.traceFile); terr != nil {
			return rep, terr
		}
	}
	return rep, err
}

// noteNoWrong warns when the simulated model, at accuracy p below 1, has
// no wrong answer to give for a spec's first step: it then answers every
// step rightly, and the job's samples per step say nothing of p.
func noteNoWrong(w io.Writer, inst task.Instance, p float64) {
	in, ok := inst.(*spec.Instance)
	if !ok || p <= 0 || p >= 1 {
		return
	}
	s := in.Initial()
	key, _, err := in.ReferenceReply(s)
	if err != nil || len(in.WrongReplies(s, key)) > 0 {
		return
	}
	fmt.Fprintf(w, "maker: warning: the spec gives the simulated model no wrong answer for its first step (add wrong, or answers whose fields it can alter): "+
		"it answers every such step rightly whatever --sim-accuracy (%.3g), so samples per step will look better than the accuracy implies\n", p)
}

// progressFor returns a status callback drawing progress on w: a live bar
// on a terminal, a line every few seconds otherwise.
func progressFor(w io.Writer, quiet bool) func(schemas.JobStatus) {
	if quiet {
		return nil
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	start := time.Now()
	var last time.Time
	return func(st schemas.JobStatus) {
		now := time.Now()
		final := schemas.Terminal(st.State)
		if !tty && !final && now.Sub(last) < 2*time.Second {
			return
		}
		last = now
		line := progressLine(st, now.Sub(start))
		if tty {
			fmt.Fprintf(w, "\r%s\x1b[K", line)
			if final {
				fmt.Fprintln(w)
			}
			return
		}
		fmt.Fprintln(w, line)
	}
}

func progressLine(st schemas.JobStatus, elapsed time.Duration) string {
	frac := st.Progress
	if frac == 0 && st.TotalSteps > 0 {
		frac = float64(st.Steps) / float64(st.TotalSteps)
	}
	const width = 30
	filled := int(frac * width)
	bar := strings.Repeat("#", filled) + strings.Repeat("-", width-filled)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(st.Steps) / s
	}
	perStep := 0.0
	if st.Steps > 0 {
		perStep = float64(st.Samples) / float64(st.Steps)
	}
	eta := ""
	if rate > 0 && frac > 0 && frac < 1 && !schemas.Terminal(st.State) {
		// From progress, not max steps: a task's progress (or its
		// expected steps) says how far it is better than a bound does.
		eta = fmt.Sprintf("  eta %s", time.Duration(elapsed.Seconds()*(1-frac)/frac*float64(time.Second)).Round(time.Second))
	}
	return fmt.Sprintf("[%s] %5.1f%%  %d/%d steps  %.0f steps/s  %.2f samples/step  %d red-flagged  %d errors%s",
		bar, 100*frac, st.Steps, st.TotalSteps, rate, perStep, st.RedFlagged, st.Errors, eta)
}

// printReport writes rep as JSON or as a short table.
func printReport(w io.Writer, rep schemas.JobReport, asJSON bool) error {
	if asJSON {
		return writeJSON(w, rep)
	}
	verdict := strings.ToUpper(rep.State)
	name := rep.Task
	if rep.TaskVersion != "" {
		name += "@" + rep.TaskVersion // the spec version the job pinned
	}
	params := clipText(string(rep.Params), 200)
	if rep.ParamsRef != "" {
		params = "params " + rep.ParamsRef
	}
	fmt.Fprintf(w, "job %s/%s  %s %s  k=%d  %s\n", rep.Tenant, rep.JobID, name, params, rep.K, verdict)
	if rep.Reason != "" {
		fmt.Fprintf(w, "  reason           %s\n", rep.Reason)
	}
	fmt.Fprintf(w, "  steps            %d / %d   wrong steps (verifier) %d\n", rep.Steps, rep.TotalSteps, rep.Errors)
	theory := ""
	if rep.ExpectedSamplesPerStep > 0 {
		theory = fmt.Sprintf(", theory %.2f", rep.ExpectedSamplesPerStep)
	}
	fmt.Fprintf(w, "  samples          %d (%.2f per step%s)   votes %d   red-flagged %d%s\n",
		rep.Samples, rep.SamplesPerStep, theory, rep.Votes, rep.RedFlagged, redFlagBreakdown(rep.RedFlags))
	fmt.Fprintf(w, "  wasted samples   %d (skipped %d, cancelled %d, late %d, duplicates %d, lost speculation %d)   re-sampled %d\n",
		rep.WastedSamples, rep.SkippedSamples, rep.CancelledSamples, rep.LateSamples, rep.DuplicateResults, rep.SpeculativeWasted, rep.Resampled)
	if rep.SpeculativeSamples > 0 {
		fmt.Fprintf(w, "  speculation      %d samples drawn ahead, %d of them lost with their guess\n", rep.SpeculativeSamples, rep.SpeculativeWasted)
	}
	if rep.ForgedResults+rep.OverclaimedResults > 0 {
		// Results nobody honest sent, or whose usage was a lie: see
		// docs/security.md, "Sample capabilities and bounded claims".
		fmt.Fprintf(w, "  untrusted        %d forged results dropped, %d results over their token bounds (red flag overclaim, charged at the bound)\n",
			rep.ForgedResults, rep.OverclaimedResults)
	}
	fmt.Fprintf(w, "  hardest step     %d samples (step %d)\n", rep.MaxSamplesInStep, rep.MaxSamplesStep)
	printReceipt(w, rep.Receipt)
	fmt.Fprintf(w, "  tokens           %d in, %d out", rep.PromptTokens, rep.CompletionTokens)
	if rep.StrongerPromptTokens+rep.StrongerCompletionTokens > 0 {
		fmt.Fprintf(w, " (stronger model %d in, %d out)", rep.StrongerPromptTokens, rep.StrongerCompletionTokens)
	}
	if rep.CostUSD > 0 {
		fmt.Fprintf(w, "   cost $%.4f", rep.CostUSD)
		if rep.ArbiterCostUSD > 0 {
			fmt.Fprintf(w, " (panel $%.4f)", rep.ArbiterCostUSD)
		}
	}
	if rep.UnverifiedCostUSD > 0 {
		fmt.Fprintf(w, "   $%.4f at the job's own prices (unverified: the fleet has no price table)", rep.UnverifiedCostUSD)
	}
	fmt.Fprintln(w)
	if rep.Escalations+rep.ArbiterDecisions > 0 {
		fmt.Fprintf(w, "  escalated        %d steps decided by the stronger model, %d by an arbiter",
			rep.Escalations, rep.ArbiterDecisions)
		if len(rep.ArbiterSteps) > 0 {
			fmt.Fprintf(w, " (%s)", stepList(rep.ArbiterSteps, rep.ArbiterDecisions))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  wall             %.2fs   %.0f steps/s\n", rep.WallSeconds, rep.StepsPerSecond)
	if nc := rep.NoConsensus; nc != nil {
		for _, p := range nc.Prior {
			fmt.Fprintf(w, "  no consensus     step %d, %s: %d samples; tally:\n", nc.Step, p.Rung, p.Counted)
			printTally(w, p.Tally)
		}
		rung := ""
		if nc.Rung != "" {
			rung = ", " + nc.Rung
		}
		fmt.Fprintf(w, "  no consensus     step %d%s: %d samples; tally:\n", nc.Step, rung, nc.Samples)
		printTally(w, nc.Tally)
	}
	fmt.Fprintf(w, "  trace sha256     %s\n", rep.TraceSHA256)
	if len(rep.FinalState) > 0 {
		fmt.Fprintf(w, "  final state      %s\n", clipText(string(rep.FinalState), 400))
	}
	if len(rep.Result) > 0 {
		fmt.Fprintf(w, "  result           %s\n", clipText(string(rep.Result), 400))
	}
	return nil
}

// printReceipt writes the reliability receipt's summary line (the JSON
// report has all of it).
func printReceipt(w io.Writer, rc *schemas.Receipt) {
	if rc == nil || len(rc.KSchedule) == 0 {
		return
	}
	ks := strconv.Itoa(rc.KSchedule[0].K)
	if n := len(rc.KSchedule) + int(rc.KRunsUnlisted); n > 1 {
		ks = fmt.Sprintf("%d→%d (%d runs)", rc.KSchedule[0].K, rc.KSchedule[len(rc.KSchedule)-1].K, n)
	}
	target := ""
	if rc.Target > 0 {
		target = fmt.Sprintf(" (target %g)", rc.Target)
	}
	fmt.Fprintf(w, "  reliability      p̂ %.4f [%.4f, %.4f] at %g%%   k %s   P(all right) >= %.4f%s   correlated steps %d\n",
		rc.PHat, rc.PLow, rc.PHigh, 100*rc.Confidence, ks, rc.BoundAchieved, target, rc.CorrelatedSteps)
}

// maxListedSteps bounds the steps a text report lists by number.
const maxListedSteps = 10

// stepList names steps, the first of total, for a person: "step 4",
// "steps 4, 9, 17", and when not all are listed, how many there are.
func stepList(steps []int64, total int64) string {
	if len(steps) == 1 && total <= 1 {
		return fmt.Sprintf("step %d", steps[0])
	}
	shown := steps[:min(len(steps), maxListedSteps)]
	parts := make([]string, len(shown))
	for i, s := range shown {
		parts[i] = strconv.FormatInt(s, 10)
	}
	list := "steps " + strings.Join(parts, ", ")
	if n := max(total, int64(len(steps))); n > int64(len(shown)) {
		list += fmt.Sprintf(", … (%d in all)", n)
	}
	return list
}

func printTally(w io.Writer, tally []schemas.TallyEntry) {
	for _, t := range tally {
		fmt.Fprintf(w, "    %4d  %s\n", t.Votes, t.VoteKey)
	}
}

func redFlagBreakdown(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	parts := make([]string, 0, len(m))
	known := []string{schemas.RedFlagParse, schemas.RedFlagLength, schemas.RedFlagTooLong, schemas.RedFlagEmpty, schemas.RedFlagRefused, schemas.RedFlagPolicy}
	for _, why := range known {
		if n := m[why]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", why, n))
		}
	}
	// Reasons this list does not know (a task spec's own red flags), in
	// name order, so no red flag goes unshown.
	for _, why := range slices.Sorted(maps.Keys(m)) {
		if n := m[why]; n > 0 && !slices.Contains(known, why) {
			parts = append(parts, fmt.Sprintf("%s %d", why, n))
		}
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
