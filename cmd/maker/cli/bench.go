package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/app/bench"
	"github.com/makerfleet/makerfleet/schemas"
)

func benchCmd(e *env) *cobra.Command {
	var (
		jf       jobFlags
		sf       simFlags
		svc      serviceFlags
		asJSON   bool
		profile  string
		runs     int
		procs    int
		taskFile string
		fair     bool
		floor    bool
		floorN   int
		many     manyFlags
		procsF   processFlags
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure steps/s and per-step overhead of one job on a local fleet with a zero-latency simulated model",
		Long: `bench runs a warm-up job, then --runs measured jobs (10 disks by default; the median is
reported; GOMAXPROCS 1 unless --gomaxprocs says otherwise) on an in-process
fleet: embedded nats-server over loopback, a redis-server it starts on a free port
(miniredis if none is installed, or --redis), and the simulated model with no latency.
It prints steps/s, the per-step overhead and samples per step against MAKER theory,
with the targets: >= 1000 steps/s and samples per step <= 1.02 x theory.
The simulated model defaults to accuracy 0.998, the per-step accuracy the paper measured
for gpt-4.1-mini (k = 2 for 10 disks); pass --sim-accuracy to bench another model.
With --task-file, each run is a pair: the built-in hanoi's job and one of that task
spec (with --params, or {"disks": --disks}) back to back in the same fleet, which goes
first alternating. Both are reported, with the spec's steps/s over the built-in's in
each pair and their median (target for examples/tasks/hanoi.yaml: >= 0.8).

With --processes, one hanoi job (--disks, --k, --seed) runs on a fleet of separate
processes instead: a nats-server (the binary, JetStream on, its file store in a new
directory), a redis-server on a free port, maker simllm (--sim-accuracy), --coordinators
maker coordinator and --voters maker voter (--concurrency each), all started from this
maker binary, each logging to its own file. It prints the job's steps/s, samples per
step against theory and whether it decided the optimal solution, beside the same job
in this process just before (--reference-disks), and each process's resident memory
(from /proc, every --mem-every): at the start, after --mem-warmup, its peak and at the
end, with the slope of a least-squares fit against steps decided after the warm-up.
Targets: >= 874 steps/s (the paper's 20 disks in 20 minutes), <= 512 KB per 1,000
steps for every process, nats-server peak <= 256 MiB. The fleet's directory is
removed at the end (kept with --keep; a failed run's logs are kept); a bench killed
with SIGKILL takes its fleet with it, and the next one removes the stores it left.
The paper's run:
  maker bench --processes --disks 20 --k 3 --sim-accuracy 0.9978`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runs < 1 {
				return usagef("--runs must be >= 1")
			}
			if err := procsF.check(cmd, jf); err != nil {
				return err
			}
			if procs < 0 {
				return usagef("--gomaxprocs must be >= 0")
			}
			if procs > 0 {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			}
			if err := jf.checkTemperatures(); err != nil {
				return err
			}
			if svc.llmBaseURL != "" {
				return usagef("bench always uses the zero-latency simulated model; use maker run to time a real one")
			}
			simCfg, err := sf.config(jf.seed)
			if err != nil {
				return err
			}
			p := simCfg.EffectiveAccuracy(jf.tempRest)
			if p >= 1 {
				return usagef("bench needs --sim-accuracy below 1, so theory is defined")
			}
			pSource := fmt.Sprintf("the simulated model's accuracy at temperature %g (--sim-accuracy)", jf.tempRest)
			valid := 1 - sf.malformed - sf.overlong
			spec, _, err := jf.spec(cmd, p, pSource, valid, builtinTasks())
			if err != nil {
				return err
			}
			var specJob *schemas.JobSpec
			var src []byte
			if taskFile != "" {
				sj := jf
				if sj.params == "" {
					sj.params = string(spec.Params)
				}
				tasks, s, err := taskFileFlag(cmd, &sj, taskFile)
				if err != nil {
					return err
				}
				js, _, err := sj.spec(cmd, p, pSource, valid, tasks)
				if err != nil {
					return err
				}
				specJob, src = &js, s
			}
			log := e.logger(slog.LevelWarn)
			opts, err := svc.options(simCfg, log)
			if err != nil {
				return err
			}
			opts.redisServer = svc.redis == ""
			opts.simHTTP = sf.http
			// As maker run: the embedded server's work queues in memory.
			opts.ownServer = svc.nats == ""
			if err := many.check(); err != nil {
				return err
			}
			if floorN < 1 {
				return usagef("--floor-steps must be >= 1")
			}
			if procsF.on {
				voters := many.voters
				if !cmd.Flags().Changed("voters") {
					voters = defaultProcessVoters
				}
				cfg := bench.ProcessesConfig{Spec: spec, Disks: jf.disks, Coordinators: many.coordinators, Voters: voters,
					Concurrency: opts.concurrency, SamplesPerCall: svc.samplesPerCall, SimArgs: sf.simllmArgs(jf.seed), SimAccuracy: sf.accuracy,
					WorkDuplicates: opts.workDuplicates, JournalDuplicates: opts.journalDuplicates}
				ref := func() (schemas.JobReport, error) {
					f, err := startFleet(cmd.Context(), opts)
					if err != nil {
						return schemas.JobReport{}, err
					}
					defer f.Close()
					return bench.Reference(cmd.Context(), f, referenceSpec(spec, min(procsF.referenceDisks, jf.disks)))
				}
				return benchProcesses(cmd, e, procsF, cfg, asJSON, ref)
			}
			if many.jobs > 0 {
				opts.maxJobs = many.config().PerCoordinator()
			}
			ctx := cmd.Context()
			f, err := startFleet(ctx, opts)
			if err != nil {
				return err
			}
			defer f.Close()
			// Opened where the harness starts profiling, as it was.
			var cpuProfile func() (io.WriteCloser, error)
			if profile != "" {
				cpuProfile = func() (io.WriteCloser, error) {
					pf, err := os.Create(profile)
					if err != nil {
						return nil, usagef("--cpuprofile: %v", err)
					}
					return pf, nil
				}
			}
			if fair {
				res, err := bench.Fair(ctx, f, spec, opts.concurrency, runs, simCfg.Latency)
				if err != nil {
					return err
				}
				return output(e.stdout, asJSON, res, func(w io.Writer) { bench.PrintFair(w, res) })
			}
			if many.jobs > 0 {
				mc := many.config()
				mc.CPUProfile = cpuProfile
				res, err := bench.Many(ctx, f, spec, mc, opts.concurrency)
				if err != nil {
					return err
				}
				return output(e.stdout, asJSON, res, func(w io.Writer) { bench.PrintMany(w, res) })
			}
			natsKind := "embedded"
			if svc.nats != "" {
				natsKind = "external"
			}
			res, err := bench.Run(ctx, f, bench.Config{
				Spec: spec, SpecJob: specJob, SpecSource: src, Runs: runs, Floor: floor, FloorSteps: floorN,
				CPUProfile: cpuProfile, Disks: jf.disks, SimAccuracy: sf.accuracy, NATS: natsKind, Concurrency: opts.concurrency,
			})
			if err != nil {
				return err
			}
			return output(e.stdout, asJSON, res, func(w io.Writer) { bench.Print(w, res) })
		},
	}
	addJobFlags(cmd, &jf, "the simulated model's accuracy")
	addSimFlags(cmd, &sf)
	addServiceFlags(cmd, &svc)
	for _, name := range []string{"llm-base-url", "model", "api-key"} {
		_ = cmd.Flags().MarkHidden(name)
	}
	cmd.Flags().Lookup("redis").Usage = "Redis URL, any form maker coordinator takes (default: a redis-server started on a free port; miniredis when none is installed) [$MAKER_REDIS_URL]"
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&profile, "cpuprofile", "", "write a CPU profile of the measured jobs to FILE")
	cmd.Flags().IntVar(&runs, "runs", 5, "measured jobs; the median one is reported")
	cmd.Flags().StringVar(&taskFile, "task-file", "", "also bench the task spec in FILE, in pairs with the built-in hanoi")
	cmd.Flags().BoolVar(&floor, "floor", false, "also run the floor loop (3 JetStream requests -> 3 voters -> Redis EVAL -> reply, nothing else; see internal/app/bench), alternating with the measured jobs, and compare medians (target >= 0.8x)")
	cmd.Flags().IntVar(&floorN, "floor-steps", bench.FloorSteps, "with --floor: steps of one floor run")
	addManyFlags(cmd, &many)
	addProcessFlags(cmd, &procsF)
	cmd.Flags().BoolVar(&fair, "fair", false, "measure fair sharing instead: tenant small's job alone vs while tenant big's 16-disk job runs (use --disks 6 --sim-latency 5ms --concurrency 4)")
	// One job on an in-process fleet is a chain of hand-offs (coordinator,
	// NATS, voter, model, NATS, coordinator, Redis). On one P they never
	// cross CPUs, which on small VMs costs more than the work itself, and
	// the other cores are left to redis-server.
	cmd.Flags().IntVar(&procs, "gomaxprocs", 1, "GOMAXPROCS for the in-process fleet (0: the runtime's default)")
	// The paper's gpt-4.1-mini erred on 0.22% of steps: p = 0.998 is the
	// accuracy of the model MAKER was demonstrated with.
	_ = cmd.Flags().Set("sim-accuracy", "0.998")
	cmd.Flags().Lookup("sim-accuracy").DefValue = "0.998"
	return cmd
}

// manyFlags say how many jobs run at once and on how many roles
// (bench.ManyConfig).
type manyFlags struct {
	jobs, coordinators, voters int
}

func addManyFlags(cmd *cobra.Command, m *manyFlags) {
	fl := cmd.Flags()
	fl.IntVar(&m.jobs, "jobs", 0, "measure N jobs at once instead (each --disks, k as for one), against one job alone on the same fleet")
	fl.IntVar(&m.coordinators, "coordinators", 1, "with --jobs or --processes: coordinators in the fleet (the jobs are shared among them)")
	fl.IntVar(&m.voters, "voters", 1, "with --jobs or --processes (default 2 there): voters in the fleet, each with --concurrency")
}

// check refuses flags that make no fleet.
func (m manyFlags) check() error {
	if m.jobs < 0 || m.coordinators < 1 || m.voters < 1 {
		return usagef("--jobs must be >= 0, --coordinators and --voters >= 1")
	}
	return nil
}

func (m manyFlags) config() bench.ManyConfig {
	return bench.ManyConfig{Jobs: m.jobs, Coordinators: m.coordinators, Voters: m.voters}
}
