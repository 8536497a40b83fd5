package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/app/bench"
	"github.com/makerfleet/makerfleet/schemas"
)

// processFlags are maker bench --processes' own flags
// (bench.ProcessesConfig).
type processFlags struct {
	on                  bool
	natsServer          string
	memEvery, memWarmup time.Duration
	profileDir          string
	keep                bool
	referenceDisks      int
	childProcs          int
}

// defaultProcessVoters is --voters with --processes unless given: the
// fleet measured by hand before (docs/benchmarks.md) ran two.
const defaultProcessVoters = 2

func addProcessFlags(cmd *cobra.Command, p *processFlags) {
	fl := cmd.Flags()
	fl.BoolVar(&p.on, "processes", false, "measure one job on a fleet of separate processes instead: a nats-server and a redis-server of its own, maker simllm, --coordinators coordinators and --voters voters (default 2 here), every process's memory sampled")
	fl.StringVar(&p.natsServer, "nats-server-bin", "", "with --processes: the nats-server binary (default: nats-server next to the maker binary, else bin/nats-server, else on PATH; make nats-server builds it)")
	fl.DurationVar(&p.memEvery, "mem-every", 5*time.Second, "with --processes: read every process's memory this often")
	fl.DurationVar(&p.memWarmup, "mem-warmup", time.Minute, "with --processes: fit the memory slopes from this long after the job's submission (0: from the start)")
	fl.StringVar(&p.profileDir, "cpuprofile-dir", "", "with --processes: write a CPU profile of each role, the model and the nats-server to DIR")
	fl.BoolVar(&p.keep, "keep", false, "with --processes: keep the fleet's logs and store (a failed run's logs are always kept)")
	fl.IntVar(&p.childProcs, "child-gomaxprocs", 0, "with --processes: GOMAXPROCS of every Go process of the fleet (0: the runtime's default; unset: 1 when they outnumber the CPUs and GOMAXPROCS is not in the environment, else the default)")
	fl.IntVar(&p.referenceDisks, "reference-disks", 14, "with --processes: first run the same job in this process, at most this many disks, for its steps/s beside the fleet's (0: none)")
}

// check refuses what --processes cannot take, before anything starts.
func (p processFlags) check(cmd *cobra.Command, jf jobFlags) error {
	if !p.on {
		for _, name := range []string{"nats-server-bin", "mem-every", "mem-warmup", "cpuprofile-dir", "keep", "reference-disks", "child-gomaxprocs"} {
			if cmd.Flags().Changed(name) {
				return usagef("--%s goes with --processes", name)
			}
		}
		return nil
	}
	for _, name := range []string{"jobs", "fair", "floor", "floor-steps", "task-file", "nats", "redis", "runs", "cpuprofile", "sim-http", "params", "params-jsonl", "data-dir"} {
		if cmd.Flags().Changed(name) {
			return usagef("--processes runs one built-in hanoi job (--disks) on a fleet of its own: --%s does not go with it", name)
		}
	}
	if jf.task != "hanoi" {
		return usagef("--processes benches the built-in hanoi, not %s", jf.task)
	}
	if p.memEvery <= 0 {
		return usagef("--mem-every must be > 0")
	}
	if p.referenceDisks < 0 {
		return usagef("--reference-disks must be >= 0")
	}
	if p.childProcs < 0 {
		return usagef("--child-gomaxprocs must be >= 0")
	}
	return nil
}

// simllmArgs are maker simllm's flags for the simulated model sf
// describes, with seed.
func (s simFlags) simllmArgs(seed int64) []string {
	args := []string{"--accuracy", strconv.FormatFloat(s.accuracy, 'g', -1, 64), "--seed", strconv.FormatInt(seed, 10)}
	for _, f := range []struct {
		flag string
		v    float64
	}{{"--malformed-rate", s.malformed}, {"--overlong-rate", s.overlong}, {"--rate-limit-rate", s.rateLimit}, {"--server-error-rate", s.serverError}} {
		if f.v != 0 {
			args = append(args, f.flag, strconv.FormatFloat(f.v, 'g', -1, 64))
		}
	}
	if s.latency != 0 {
		args = append(args, "--latency", s.latency.String())
	}
	if s.jitter != 0 {
		args = append(args, "--latency-jitter", s.jitter.String())
	}
	if s.wrongSpread != 0 {
		args = append(args, "--wrong-spread", strconv.Itoa(s.wrongSpread))
	}
	if s.hardSteps != "" {
		args = append(args, "--hard-steps", s.hardSteps)
	}
	return args
}

// findNATSServer is --nats-server-bin, else the first nats-server found
// next to the maker binary exe, in ./bin or on PATH.
func findNATSServer(flag, exe string) (string, error) {
	if flag != "" {
		if _, err := os.Stat(flag); err != nil {
			return "", usagef("--nats-server-bin: %v", err)
		}
		return flag, nil
	}
	for _, p := range []string{filepath.Join(filepath.Dir(exe), "nats-server"), filepath.Join("bin", "nats-server")} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return filepath.Abs(p)
		}
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	return "", usagef("no nats-server binary next to %s, in ./bin or on PATH: build it with make nats-server (bin/nats-server, the version in go.mod), or give --nats-server-bin PATH", exe)
}

// benchProcesses is maker bench --processes: the same-run reference in
// this process first (startRef's fleet), then the fleet of processes.
func benchProcesses(cmd *cobra.Command, e *env, p processFlags, cfg bench.ProcessesConfig, asJSON bool,
	startRef func() (schemas.JobReport, error)) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if cfg.NATSServer, err = findNATSServer(p.natsServer, exe); err != nil {
		return err
	}
	cfg.Maker = exe
	cfg.MemEvery, cfg.MemWarmup, cfg.ProfileDir, cfg.Keep = p.memEvery, p.memWarmup, p.profileDir, p.keep
	cfg.ChildGoMaxProcs = p.childProcs
	if !cmd.Flags().Changed("child-gomaxprocs") {
		// The nats-server, the model and the roles.
		goProcs := 2 + cfg.Coordinators + cfg.Voters
		cfg.ChildGoMaxProcs = bench.ChildGoMaxProcsFor(goProcs, runtime.NumCPU(), os.Getenv("GOMAXPROCS"))
	}
	if p.memWarmup == 0 {
		cfg.MemWarmup = -1 // the config's 0 is its default, a minute
	}
	cfg.Progress = e.stderr
	if p.referenceDisks > 0 {
		rep, err := startRef()
		if err != nil {
			return fmt.Errorf("the reference in this process: %w", err)
		}
		cfg.Reference = &rep
		fmt.Fprintf(e.stderr, "bench --processes: in one process first: %d steps at %.0f steps/s\n", rep.Steps, rep.StepsPerSecond)
	}
	res, err := bench.Processes(cmd.Context(), cfg)
	if err != nil && !errors.Is(err, bench.ErrWrongSolution) {
		return err
	}
	if oerr := output(e.stdout, asJSON, res, func(w io.Writer) { bench.PrintProcesses(w, res) }); oerr != nil {
		return oerr
	}
	return err
}

// referenceSpec is spec at disks disks (the reference runs at most
// --reference-disks).
func referenceSpec(spec schemas.JobSpec, disks int) schemas.JobSpec {
	spec.Params, _ = json.Marshal(map[string]int{"disks": disks})
	return spec
}
