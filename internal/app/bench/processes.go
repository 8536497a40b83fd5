package bench

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/internal/app/devserver"
	"github.com/makerfleet/makerfleet/internal/app/fleet"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// One job on a fleet of separate processes (issue "Throughput and memory
// at fleet scale"): a nats-server and a redis-server of their own, maker
// simllm, coordinators and voters, each an OS process started from the
// maker binary, with every process's resident memory sampled against the
// job's steps. The targets: the paper's run (20 disks, 1,048,575 steps) in
// at most 20 minutes, every process's memory flat after the first minute
// (at most 512 KB per 1,000 steps, by a least-squares fit) and the
// nats-server's peak at most 256 MiB.
const (
	// targetFleetStepsPerSecond is 1,048,575 steps in 20 minutes.
	targetFleetStepsPerSecond = 874
	// targetSlopeKB is KiB of resident memory per 1,000 steps.
	targetSlopeKB = 512
	// targetNATSPeakMiB is the nats-server's peak resident memory.
	targetNATSPeakMiB = 256
)

// ErrWrongSolution: the job of bench --processes ran to its end but is not
// the optimal solution (not solved, wrong steps, another trace); the
// result returned with it has the figures.
var ErrWrongSolution = errors.New("the fleet did not solve the job right")

// SimModel is the model name the fleet's voters ask the simulated model
// for (one of maker simllm's defaults).
const SimModel = "sim-1"

// ProcessesConfig is one maker bench --processes measurement.
type ProcessesConfig struct {
	// Spec is the job: the built-in hanoi with Disks disks.
	Spec  schemas.JobSpec
	Disks int
	// Maker is the maker binary the roles run (maker bench: its own).
	Maker string
	// NATSServer and RedisServer are the servers' binaries.
	NATSServer, RedisServer string
	// Coordinators and Voters are how many of each run, each voter with
	// Concurrency; SamplesPerCall is the coordinators' --samples-per-call.
	Coordinators, Voters, Concurrency, SamplesPerCall int
	// WorkDuplicates and JournalDuplicates are the coordinators'
	// --work-duplicates and --journal-duplicates: the streams' duplicate
	// windows, which the nats-server's memory follows (0: the defaults).
	WorkDuplicates, JournalDuplicates time.Duration
	// SimArgs are maker simllm's flags besides --addr and --model (its
	// accuracy, seed, latency, faults); SimAccuracy is the accuracy, as
	// reported.
	SimArgs     []string
	SimAccuracy float64
	// MemEvery is how often every process's memory is read (default 5
	// s); the slope is fitted to the samples from MemWarmup on (default 1
	// minute; a negative value: from the start).
	MemEvery, MemWarmup time.Duration
	// ProfileDir, when set, receives a CPU profile of each role (its
	// --cpuprofile) and of the nats-server (its profiling port, in 10 s
	// windows: go tool pprof merges them).
	ProfileDir string
	// Keep keeps the fleet's directory (logs, the nats-server's store) of
	// a run that succeeded; a failed run's logs are always kept.
	Keep bool
	// ChildGoMaxProcs is GOMAXPROCS in the environment of every Go
	// process of the fleet (the nats-server, the model, the roles); 0
	// leaves the environment's. ChildGoMaxProcsFor gives the default.
	ChildGoMaxProcs int
	// Reference is the report of a job run in one process just before
	// (Reference), shown beside the fleet's figures; nil: none.
	Reference *schemas.JobReport
	// Progress receives a line as the fleet starts and at each memory
	// sample; nil: none.
	Progress io.Writer
}

// ProcessesResult is what maker bench --processes --json prints.
type ProcessesResult struct {
	Task         string  `json:"task"`
	Disks        int     `json:"disks"`
	K            int     `json:"k"`
	Seed         int64   `json:"seed"`
	SimAccuracy  float64 `json:"sim_accuracy"`
	Coordinators int     `json:"coordinators"`
	Voters       int     `json:"voters"`
	Concurrency  int     `json:"concurrency"`
	// WorkDuplicates and JournalDuplicates are the streams' duplicate
	// windows given to the coordinators ("": their defaults).
	WorkDuplicates    string `json:"work_duplicates,omitempty"`
	JournalDuplicates string `json:"journal_duplicates,omitempty"`
	// NATSServer and RedisServer are the servers' versions, NATSModule
	// the nats-server version maker is built with (go.mod's).
	NATSServer  string `json:"nats_server"`
	NATSModule  string `json:"nats_module,omitempty"`
	RedisServer string `json:"redis_server"`
	CPUs        int    `json:"cpus"`
	GoVersion   string `json:"go_version"`
	// ChildGoMaxProcs is the fleet's Go processes' GOMAXPROCS (0: their
	// runtime's default, one thread a CPU).
	ChildGoMaxProcs int `json:"child_gomaxprocs"`
	// StartSeconds is how long the fleet took to start, before the job.
	StartSeconds float64 `json:"start_seconds"`

	JobID      string `json:"job_id"`
	State      string `json:"state"`
	Solved     bool   `json:"solved"`
	Steps      int64  `json:"steps"`
	TotalSteps int64  `json:"total_steps"`
	// Errors are the decided steps the task's verifier found wrong;
	// TraceOptimal says the decided trace hashes as the optimal
	// solution's (computed here from the strategy, not by the fleet).
	Errors             int64   `json:"errors"`
	TraceSHA256        string  `json:"trace_sha256"`
	OptimalTraceSHA256 string  `json:"optimal_trace_sha256"`
	TraceOptimal       bool    `json:"trace_optimal"`
	WallSeconds        float64 `json:"wall_seconds"`
	StepsPerSecond     float64 `json:"steps_per_second"`
	Samples            int64   `json:"samples"`
	SamplesPerStep     float64 `json:"samples_per_step"`
	// ExpectedSamplesPerStep is MAKER theory's, at the simulated model's
	// accuracy.
	ExpectedSamplesPerStep float64 `json:"expected_samples_per_step"`
	SamplesVsTheory        float64 `json:"samples_vs_theory"`

	// Reference is the job in one process, run just before.
	Reference *ProcessesReference `json:"reference,omitempty"`

	MemEverySeconds  float64 `json:"mem_every_seconds"`
	MemWarmupSeconds float64 `json:"mem_warmup_seconds"`
	// Processes are the fleet's processes' memory figures, Timeline every
	// sample (RSS in KiB, in Processes' order).
	Processes []ProcessMemory `json:"processes"`
	Timeline  []MemSample     `json:"timeline"`

	TargetStepsPerSecond      float64 `json:"target_steps_per_second"`
	TargetSamplesVsTheory     float64 `json:"target_samples_vs_theory"`
	TargetSlopeKBPer1000Steps float64 `json:"target_slope_kb_per_1000_steps"`
	TargetNATSPeakMiB         float64 `json:"target_nats_peak_mib"`
	MeetsTargets              bool    `json:"meets_targets"`

	// Dir is the fleet's directory, when kept; Profiles the CPU profiles
	// written.
	Dir      string   `json:"dir,omitempty"`
	Profiles []string `json:"profiles,omitempty"`
}

// ProcessesReference is the same-run reference: a job on the in-process
// fleet of maker bench, just before the fleet of processes started.
type ProcessesReference struct {
	Disks          int     `json:"disks"`
	Steps          int64   `json:"steps"`
	Solved         bool    `json:"solved"`
	Errors         int64   `json:"errors"`
	WallSeconds    float64 `json:"wall_seconds"`
	StepsPerSecond float64 `json:"steps_per_second"`
	SamplesPerStep float64 `json:"samples_per_step"`
	GoMaxProcs     int     `json:"gomaxprocs"`
	// FleetVsReference is the fleet's steps/s over the reference's.
	FleetVsReference float64 `json:"fleet_vs_reference"`
}

// ProcessMemory is one process's resident memory over the job, in KiB:
// at the job's submission, at the first sample after the warm-up (-1:
// the job ended first), its peak (VmHWM, over its whole life) and at the
// end; and the least-squares slope against steps decided of the samples
// from the warm-up on, in KiB per 1,000 steps (nil: fewer than 3).
type ProcessMemory struct {
	Name          string   `json:"name"`
	PID           int      `json:"pid"`
	StartKB       int64    `json:"start_kb"`
	AfterWarmupKB int64    `json:"after_warmup_kb"`
	PeakKB        int64    `json:"peak_kb"`
	EndKB         int64    `json:"end_kb"`
	SlopeKB       *float64 `json:"slope_kb_per_1000_steps"`
	SlopePoints   int      `json:"slope_points"`
	// SlopeOK: the slope is within the target; PeakOK: for the
	// nats-server, the peak is (always true for the others).
	SlopeOK bool `json:"slope_ok"`
	PeakOK  bool `json:"peak_ok"`
}

// MemSample is one reading of every process: seconds since the job was
// submitted, steps decided by then, and each process's VmRSS in KiB.
type MemSample struct {
	Seconds float64 `json:"seconds"`
	Steps   int64   `json:"steps"`
	RSSKB   []int64 `json:"rss_kb"`
}

// Reference runs spec once on the in-process fleet f: the figure
// Processes shows beside the fleet's.
func Reference(ctx context.Context, f *fleet.Fleet, spec schemas.JobSpec) (schemas.JobReport, error) {
	return runJob(ctx, f, spec)
}

// The lines that say a process is up, and where it listens.
var (
	natsReadyRE    = regexp.MustCompile(`Server is ready`)
	natsListenRE   = regexp.MustCompile(`Listening for client connections on (\S+)`)
	natsProfileRE  = regexp.MustCompile(`profiling port: (\d+)`)
	redisReadyRE   = regexp.MustCompile(`Ready to accept connections`)
	simReadyRE     = regexp.MustCompile(`simllm listening on (http://\S+/v1)`)
	coordReadyRE   = regexp.MustCompile(`coordinator started`)
	voterReadyRE   = regexp.MustCompile(`voter started`)
	versionRE      = regexp.MustCompile(`v=?(\d+\.\d+\.\d+\S*)`)
	serverStartMax = 30 * time.Second
)

// procFleet is the fleet's processes, in start order, and its directory.
type procFleet struct {
	dir      string
	children []*child
	natsURL  string
	redisURL string
	simURL   string
	profPort string   // the nats-server's profiling port, "" without
	env      []string // every child's environment
	// peakKB is each child's VmHWM at the last sample (it only grows).
	peakKB []int64
}

// Processes starts the fleet of cfg, runs its job to the end while
// sampling every process's memory, stops the fleet and returns the
// figures. Every process it started is stopped on every return, ctx's end
// included; a process that exits during the run fails it with the end of
// its log.
func Processes(ctx context.Context, cfg ProcessesConfig) (res ProcessesResult, err error) {
	if _, err := readProcMem("self"); err != nil {
		return res, fmt.Errorf("bench --processes reads every process's memory from /proc (Linux): %w", err)
	}
	if cfg.MemEvery <= 0 {
		cfg.MemEvery = 5 * time.Second
	}
	if cfg.MemWarmup == 0 {
		cfg.MemWarmup = time.Minute
	}
	cfg.MemWarmup = max(cfg.MemWarmup, 0)
	if cfg.RedisServer == "" {
		if cfg.RedisServer, err = exec.LookPath("redis-server"); err != nil {
			return res, fmt.Errorf("bench --processes needs redis-server: %w", err)
		}
	}
	res = ProcessesResult{
		Task: cfg.Spec.Task, Disks: cfg.Disks, K: cfg.Spec.K, Seed: cfg.Spec.Seed, SimAccuracy: cfg.SimAccuracy,
		Coordinators: cfg.Coordinators, Voters: cfg.Voters, Concurrency: cfg.Concurrency,
		WorkDuplicates: durationText(cfg.WorkDuplicates), JournalDuplicates: durationText(cfg.JournalDuplicates),
		NATSServer: version(cfg.NATSServer), NATSModule: natsModule(), RedisServer: version(cfg.RedisServer),
		CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), ChildGoMaxProcs: effectiveChildGoMaxProcs(cfg.ChildGoMaxProcs),
		MemEverySeconds: cfg.MemEvery.Seconds(), MemWarmupSeconds: cfg.MemWarmup.Seconds(),
		TargetStepsPerSecond: targetFleetStepsPerSecond, TargetSamplesVsTheory: targetSamplesVsTheory,
		TargetSlopeKBPer1000Steps: targetSlopeKB, TargetNATSPeakMiB: targetNATSPeakMiB,
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return res, fmt.Errorf("--cpuprofile-dir: %w", err)
		}
	}
	sweepStale(os.TempDir(), cfg.Progress)
	dir, err := os.MkdirTemp("", fleetDirPattern)
	if err != nil {
		return res, err
	}
	if err := claimDir(dir); err != nil {
		_ = os.RemoveAll(dir)
		return res, err
	}
	pf := &procFleet{dir: dir, env: childEnv(cfg.ChildGoMaxProcs)}
	defer func() {
		pf.stop()
		releaseDir(dir)
		switch {
		case cfg.Keep:
			res.Dir = dir
			progressf(cfg.Progress, "bench --processes: the fleet's logs and store are kept in %s\n", dir)
		case err != nil && ctx.Err() == nil:
			// The logs tell what happened; the store can be gigabytes.
			_ = os.RemoveAll(filepath.Join(dir, "nats"))
			_ = os.RemoveAll(filepath.Join(dir, "redis"))
			err = fmt.Errorf("%w (the fleet's logs are kept in %s)", err, dir)
		default:
			_ = os.RemoveAll(dir)
		}
	}()
	start := time.Now()
	if err := pf.start(ctx, cfg); err != nil {
		return res, err
	}
	res.StartSeconds = time.Since(start).Seconds()
	var pids []string
	for _, c := range pf.children {
		pids = append(pids, fmt.Sprintf("%s=%d", c.name, c.pid()))
	}
	progressf(cfg.Progress, "bench --processes: fleet up in %.1fs (nats %s, redis %s, model %s); pids: %s; logs in %s\n",
		res.StartSeconds, pf.natsURL, pf.redisURL, pf.simURL, strings.Join(pids, " "), dir)

	stopProfile := func() []string { return nil }
	if pf.profPort != "" {
		stopProfile = startNATSProfile(pf.profPort, cfg.ProfileDir)
	}
	rep, timeline, err := pf.runJob(ctx, cfg)
	res.Profiles = stopProfile()
	if err != nil {
		return res, err
	}
	if cfg.ProfileDir != "" {
		// The roles write theirs as they stop.
		pf.stop()
		for _, c := range pf.children {
			if p := filepath.Join(cfg.ProfileDir, c.name+".pprof"); fileExists(p) {
				res.Profiles = append(res.Profiles, p)
			}
		}
	}
	res.fill(rep, timeline, pf, cfg)
	if cfg.Reference != nil {
		res.Reference = referenceOf(*cfg.Reference, res.StepsPerSecond)
	}
	res.OptimalTraceSHA256 = optimalTrace(cfg.Disks)
	res.TraceOptimal = res.TraceSHA256 == res.OptimalTraceSHA256
	res.MeetsTargets = res.Solved && res.Errors == 0 && res.TraceOptimal &&
		res.StepsPerSecond >= targetFleetStepsPerSecond && res.SamplesVsTheory <= targetSamplesVsTheory
	for _, p := range res.Processes {
		res.MeetsTargets = res.MeetsTargets && p.SlopeOK && p.PeakOK
	}
	if !res.Solved || res.Errors != 0 || !res.TraceOptimal {
		return res, fmt.Errorf("%w: job %s ended %s with %d wrong steps, trace %s (the optimal solution's: %s)",
			ErrWrongSolution, rep.JobID, rep.State, rep.Errors, rep.TraceSHA256, res.OptimalTraceSHA256)
	}
	return res, nil
}

// start starts the servers, the model and the roles, each waited for
// until its log says it is up.
func (pf *procFleet) start(ctx context.Context, cfg ProcessesConfig) error {
	// The nats-server: JetStream on, its file store in the fleet's
	// directory, a port of its own choosing.
	store := filepath.Join(pf.dir, "nats")
	args := []string{"-a", "127.0.0.1", "-p", "-1", "-js", "-sd", store}
	if cfg.ProfileDir != "" {
		args = append(args, "--profile", "-1")
	}
	ns, err := pf.add(ctx, "nats-server", cfg.NATSServer, natsReadyRE, args...)
	if err != nil {
		return err
	}
	m := ns.logMatch(natsListenRE)
	if m == nil {
		return fmt.Errorf("nats-server said it is ready without the port it listens on%s", ns.tail())
	}
	pf.natsURL = "nats://" + m[1]
	if cfg.ProfileDir != "" {
		if m := ns.logMatch(natsProfileRE); m != nil {
			pf.profPort = m[1]
		}
	}
	if err := pf.startRedis(ctx, cfg.RedisServer); err != nil {
		return err
	}
	prof := func(name string) []string {
		if cfg.ProfileDir == "" {
			return nil
		}
		return []string{"--cpuprofile", filepath.Join(cfg.ProfileDir, name+".pprof")}
	}
	sim, err := pf.add(ctx, "simllm", cfg.Maker, simReadyRE,
		append(append([]string{"simllm", "--addr", "127.0.0.1:0", "--model", SimModel}, cfg.SimArgs...), prof("simllm")...)...)
	if err != nil {
		return err
	}
	pf.simURL = sim.match[1]
	// The roles start together and are waited for together.
	var roles []*child
	for i := range cfg.Coordinators {
		name := "coordinator-" + strconv.Itoa(i+1)
		args := []string{"coordinator", "--nats", pf.natsURL, "--redis", pf.redisURL, "--id", name,
			"--samples-per-call", strconv.Itoa(max(cfg.SamplesPerCall, 1))}
		if cfg.WorkDuplicates > 0 {
			args = append(args, "--work-duplicates", cfg.WorkDuplicates.String())
		}
		if cfg.JournalDuplicates > 0 {
			args = append(args, "--journal-duplicates", cfg.JournalDuplicates.String())
		}
		c, err := pf.launch(name, cfg.Maker, coordReadyRE, append(args, prof(name)...)...)
		if err != nil {
			return err
		}
		roles = append(roles, c)
	}
	for i := range cfg.Voters {
		name := "voter-" + strconv.Itoa(i+1)
		args := []string{"voter", "--nats", pf.natsURL, "--llm-base-url", pf.simURL, "--model", SimModel, "--id", name,
			"--concurrency", strconv.Itoa(cfg.Concurrency)}
		if cfg.SamplesPerCall > 1 {
			args = append(args, "--supports-n")
		}
		c, err := pf.launch(name, cfg.Maker, voterReadyRE, append(args, prof(name)...)...)
		if err != nil {
			return err
		}
		roles = append(roles, c)
	}
	for _, c := range roles {
		if err := c.waitReady(ctx, serverStartMax); err != nil {
			return err
		}
	}
	return nil
}

// startRedis starts a redis-server on a free port, persistence off; a
// port taken meanwhile is tried again with another.
func (pf *procFleet) startRedis(ctx context.Context, path string) error {
	dir := filepath.Join(pf.dir, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var last error
	for range 5 {
		port, err := devserver.FreePort()
		if err != nil {
			return err
		}
		c, err := pf.launch("redis-server", path, redisReadyRE,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
		if err != nil {
			return err
		}
		if last = c.waitReady(ctx, serverStartMax); last == nil {
			pf.redisURL = "redis://127.0.0.1:" + strconv.Itoa(port) + "/0"
			return nil
		}
		if ctx.Err() != nil {
			return last
		}
		c.stop(childStopGrace)
		pf.children = pf.children[:len(pf.children)-1]
	}
	return last
}

// launch starts one process of the fleet, its log in the fleet's
// directory; add also waits for it to be ready.
func (pf *procFleet) launch(name, path string, ready *regexp.Regexp, args ...string) (*child, error) {
	c, err := startChild(name, path, filepath.Join(pf.dir, name+".log"), pf.env, ready, args...)
	if err != nil {
		return nil, err
	}
	pf.children = append(pf.children, c)
	return c, nil
}

func (pf *procFleet) add(ctx context.Context, name, path string, ready *regexp.Regexp, args ...string) (*child, error) {
	c, err := pf.launch(name, path, ready, args...)
	if err != nil {
		return nil, err
	}
	return c, c.waitReady(ctx, serverStartMax)
}

// stop stops the fleet in the reverse of its start order, the roles
// together first (a voter drains, a coordinator hands its jobs back, each
// writes its CPU profile), then the model and the servers. Stopping a
// stopped fleet does nothing.
func (pf *procFleet) stop() {
	var roles, servers []*child
	for _, c := range pf.children {
		if strings.HasPrefix(c.name, "coordinator-") || strings.HasPrefix(c.name, "voter-") {
			roles = append(roles, c)
		} else {
			servers = append(servers, c)
		}
	}
	done := make(chan struct{}, len(roles))
	for _, c := range roles {
		go func() { c.stop(childStopGrace); done <- struct{}{} }() // owned: waited for below
	}
	for range roles {
		<-done
	}
	for i := len(servers) - 1; i >= 0; i-- {
		servers[i].stop(childStopGrace)
	}
}

// runJob submits cfg's job, follows it to its report and samples every
// process's memory meanwhile: at submission, every cfg.MemEvery, and
// once more at the end.
func (pf *procFleet) runJob(ctx context.Context, cfg ProcessesConfig) (schemas.JobReport, []MemSample, error) {
	cl, err := client.Dial(ctx, pf.natsURL, client.WithName("maker-bench"))
	if err != nil {
		return schemas.JobReport{}, nil, err
	}
	defer cl.Close()
	spec := cfg.Spec
	spec.JobID = jobs.NewJobID()
	sub, err := cl.Submit(ctx, spec)
	if err != nil {
		return schemas.JobReport{}, nil, fmt.Errorf("submit: %w", err)
	}
	submitted := time.Now()
	var steps atomic.Int64
	type result struct {
		rep schemas.JobReport
		err error
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() { // owned: cancelled and waited for below
		rep, err := cl.Wait(wctx, sub.Tenant+"/"+sub.JobID, func(st schemas.JobStatus) { steps.Store(st.Steps) })
		done <- result{rep, err}
	}()
	defer func() { cancel(); <-done }()

	// A process that exits while the job runs ends the bench.
	died := make(chan *child, len(pf.children))
	watchEnd := make(chan struct{})
	defer close(watchEnd)
	for _, c := range pf.children {
		go func() { // owned: ends with the process or with runJob
			select {
			case <-c.exited:
				died <- c
			case <-watchEnd:
			}
		}()
	}

	var timeline []MemSample
	pf.peakKB = make([]int64, len(pf.children))
	sample := func(n int64) error {
		s := MemSample{Seconds: time.Since(submitted).Seconds(), Steps: n}
		for i, c := range pf.children {
			m, err := readProcMem(strconv.Itoa(c.pid()))
			if err != nil {
				// Most likely it exited: say so with its log once it is
				// reaped.
				select {
				case <-c.exited:
					return c.died()
				case <-time.After(childStopGrace):
					return fmt.Errorf("%s (pid %d): %w", c.name, c.pid(), err)
				}
			}
			s.RSSKB = append(s.RSSKB, m.RSS)
			pf.peakKB[i] = max(pf.peakKB[i], m.HWM)
		}
		timeline = append(timeline, s)
		progressf(cfg.Progress, "%s\n", pf.sampleLine(s))
		return nil
	}
	if err := sample(0); err != nil {
		return schemas.JobReport{}, nil, fmt.Errorf("at the job's start: %w", err)
	}
	tick := time.NewTicker(cfg.MemEvery)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			done <- r // for the deferred wait
			if r.err != nil {
				return schemas.JobReport{}, timeline, fmt.Errorf("waiting for job %s: %w", sub.JobID, r.err)
			}
			// The last sample: the job's end, before anything stops.
			if err := sample(r.rep.Steps); err != nil {
				return schemas.JobReport{}, timeline, fmt.Errorf("at the job's end: %w", err)
			}
			return r.rep, timeline, nil
		case c := <-died:
			return schemas.JobReport{}, timeline, fmt.Errorf("at step %d: %w", steps.Load(), c.died())
		case <-tick.C:
			if err := sample(steps.Load()); err != nil {
				return schemas.JobReport{}, timeline, fmt.Errorf("at step %d: %w", steps.Load(), err)
			}
		case <-ctx.Done():
			return schemas.JobReport{}, timeline, ctx.Err()
		}
	}
}

// sampleLine is a memory sample as the progress shows it.
func (pf *procFleet) sampleLine(s MemSample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mem %6.0fs step %8d:", s.Seconds, s.Steps)
	for i, c := range pf.children {
		fmt.Fprintf(&b, "  %s %.1f", c.name, float64(s.RSSKB[i])/1024)
	}
	b.WriteString(" MiB")
	return b.String()
}

// fill sets res's job and memory figures from the report, the samples and
// the processes' peaks.
func (res *ProcessesResult) fill(rep schemas.JobReport, timeline []MemSample, pf *procFleet, cfg ProcessesConfig) {
	res.JobID, res.State, res.Solved = rep.JobID, rep.State, rep.Solved
	res.Steps, res.TotalSteps, res.Errors, res.TraceSHA256 = rep.Steps, rep.TotalSteps, rep.Errors, rep.TraceSHA256
	res.WallSeconds, res.StepsPerSecond = rep.WallSeconds, rep.StepsPerSecond
	res.Samples, res.SamplesPerStep, res.ExpectedSamplesPerStep = rep.Samples, rep.SamplesPerStep, rep.ExpectedSamplesPerStep
	if rep.ExpectedSamplesPerStep > 0 {
		res.SamplesVsTheory = rep.SamplesPerStep / rep.ExpectedSamplesPerStep
	}
	res.Timeline = timeline
	warm := cfg.MemWarmup.Seconds()
	for i, c := range pf.children {
		pm := ProcessMemory{Name: c.name, PID: c.pid(), AfterWarmupKB: -1, PeakKB: pf.peakKB[i], PeakOK: true}
		if len(timeline) > 0 {
			pm.StartKB, pm.EndKB = timeline[0].RSSKB[i], timeline[len(timeline)-1].RSSKB[i]
		}
		var xs, ys []float64
		for _, s := range timeline {
			pm.PeakKB = max(pm.PeakKB, s.RSSKB[i])
			if s.Seconds < warm {
				continue
			}
			if pm.AfterWarmupKB < 0 {
				pm.AfterWarmupKB = s.RSSKB[i]
			}
			xs, ys = append(xs, float64(s.Steps)), append(ys, float64(s.RSSKB[i]))
		}
		pm.SlopePoints = len(xs)
		if k, ok := slope(xs, ys); ok {
			k = math.Round(k*1000*10) / 10
			pm.SlopeKB = &k
			pm.SlopeOK = k <= targetSlopeKB
		}
		if c.name == "nats-server" {
			pm.PeakOK = pm.PeakKB <= targetNATSPeakMiB*1024
		}
		res.Processes = append(res.Processes, pm)
	}
}

func referenceOf(rep schemas.JobReport, fleetStepsPerSecond float64) *ProcessesReference {
	r := &ProcessesReference{Steps: rep.Steps, Solved: rep.Solved, Errors: rep.Errors, WallSeconds: rep.WallSeconds,
		StepsPerSecond: rep.StepsPerSecond, SamplesPerStep: rep.SamplesPerStep, GoMaxProcs: runtime.GOMAXPROCS(0)}
	_ = json.Unmarshal(rep.Params, &struct {
		Disks *int `json:"disks"`
	}{&r.Disks})
	if r.StepsPerSecond > 0 {
		r.FleetVsReference = math.Round(fleetStepsPerSecond/r.StepsPerSecond*100) / 100
	}
	return r
}

// optimalTrace is the trace_sha256 of the optimal solution of disks
// disks: each step's vote key (the move and the pegs after it) and a
// newline, from hanoi.OptimalState, not from any run.
func optimalTrace(disks int) string {
	h := sha256.New()
	for s := int64(1); s < int64(1)<<disks; s++ {
		st := hanoi.OptimalState(disks, s)
		h.Write([]byte(hanoi.Answer{Move: *st.Prev, NextState: st.Pegs}.Key()))
		h.Write([]byte{'\n'})
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// startNATSProfile takes CPU profiles from the nats-server's profiling
// port in 10 s windows, into dir/nats-server-NNN.pprof, until the returned
// func is called; that func waits for the window under way and returns
// the files written.
func startNATSProfile(port, dir string) func() []string {
	const window = 10
	stop := make(chan struct{})
	done := make(chan []string, 1)
	go func() { // owned: the returned func stops it and waits
		var files []string
		hc := &http.Client{Timeout: 3 * window * time.Second}
		url := "http://" + net.JoinHostPort("127.0.0.1", port) + "/debug/pprof/profile?seconds=" + strconv.Itoa(window)
		for i := 1; ; i++ {
			name := filepath.Join(dir, fmt.Sprintf("nats-server-%03d.pprof", i))
			if err := fetchTo(hc, url, name); err == nil {
				files = append(files, name)
			}
			select {
			case <-stop:
				done <- files
				return
			default:
			}
		}
	}()
	return func() []string { close(stop); return <-done }
}

func fetchTo(hc *http.Client, url, path string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// version is what binary --version says, the version number alone when
// it has one.
func version(binary string) string {
	out, err := exec.Command(binary, "--version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	if m := versionRE.FindStringSubmatch(string(out)); m != nil {
		return m[1]
	}
	return strings.TrimSpace(string(out))
}

// natsModule is the nats-server module version maker is built with.
func natsModule() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/nats-io/nats-server/v2" {
			return strings.TrimPrefix(d.Version, "v")
		}
	}
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func progressf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format, args...)
	}
}

// PrintProcesses writes r as maker bench --processes prints it.
func PrintProcesses(w io.Writer, r ProcessesResult) {
	mod := ""
	if r.NATSModule != "" && r.NATSModule != r.NATSServer {
		mod = fmt.Sprintf(" (maker is built with %s)", r.NATSModule)
	}
	windows := ""
	if r.WorkDuplicates != "" || r.JournalDuplicates != "" {
		windows = fmt.Sprintf(" (duplicate windows: work %s, journal %s)", cmp.Or(r.WorkDuplicates, "default"), cmp.Or(r.JournalDuplicates, "default"))
	}
	threads := "GOMAXPROCS default"
	if r.ChildGoMaxProcs > 0 {
		threads = fmt.Sprintf("GOMAXPROCS %d", r.ChildGoMaxProcs)
	}
	fmt.Fprintf(w, "bench --processes: hanoi %d disks (%d steps), k=%d, seed %d, sim accuracy %g; %d coordinator(s)%s, %d voter(s) x concurrency %d; nats-server %s%s, redis-server %s; %d CPUs, %s in each Go process, %s\n",
		r.Disks, r.TotalSteps, r.K, r.Seed, r.SimAccuracy, r.Coordinators, windows, r.Voters, r.Concurrency, r.NATSServer, mod, r.RedisServer, r.CPUs, threads, r.GoVersion)
	trace := "the optimal solution's"
	if !r.TraceOptimal {
		trace = "NOT the optimal solution's " + r.OptimalTraceSHA256
	}
	right := r.Solved && r.Errors == 0 && r.TraceOptimal
	fmt.Fprintf(w, "  job %s: %s, %d of %d steps, wrong steps %d, trace %s (%s: %s)\n", r.JobID, r.State, r.Steps, r.TotalSteps, r.Errors, r.TraceSHA256, trace, passMark(right))
	fmt.Fprintf(w, "  steps/s            %8.0f   wall %.1fs after a %.1fs start (target >= %d, the paper's 1,048,575 steps in 20 min: %s)\n",
		r.StepsPerSecond, r.WallSeconds, r.StartSeconds, targetFleetStepsPerSecond, okMark(r.StepsPerSecond >= targetFleetStepsPerSecond))
	if ref := r.Reference; ref != nil {
		fmt.Fprintf(w, "  in one process     %8.0f   steps/s, hanoi %d disks, the same run just before (GOMAXPROCS %d): the fleet %.2fx\n",
			ref.StepsPerSecond, ref.Disks, ref.GoMaxProcs, ref.FleetVsReference)
	}
	fmt.Fprintf(w, "  samples/step       %8.3f   theory %.3f   ratio %.3f (target <= %.2f: %s)\n",
		r.SamplesPerStep, r.ExpectedSamplesPerStep, r.SamplesVsTheory, targetSamplesVsTheory, okMark(r.SamplesVsTheory <= targetSamplesVsTheory))
	warm := time.Duration(r.MemWarmupSeconds * float64(time.Second))
	fmt.Fprintf(w, "memory: VmRSS every %s from the job's submission (%d samples); slope: least squares against steps decided from %s on (target <= %d KB per 1,000 steps), nats-server peak (VmHWM) target <= %d MiB\n",
		time.Duration(r.MemEverySeconds*float64(time.Second)), len(r.Timeline), warm, targetSlopeKB, targetNATSPeakMiB)
	row := "  %-14s %8s %10s %12s %10s %10s %18s  %s\n"
	fmt.Fprintf(w, row, "process", "pid", "start MiB", "after "+warm.String(), "peak MiB", "end MiB", "KB / 1,000 steps", "")
	for _, p := range r.Processes {
		after := "-"
		if p.AfterWarmupKB >= 0 {
			after = mibText(p.AfterWarmupKB)
		}
		slopeText, verdict := "-", fmt.Sprintf("n/a (%d samples from %s on; 3 needed)", p.SlopePoints, warm)
		if p.SlopeKB != nil {
			slopeText, verdict = fmt.Sprintf("%+.1f", *p.SlopeKB), limitMark(p.SlopeOK)
		}
		if p.Name == "nats-server" {
			verdict += ", peak " + limitMark(p.PeakOK)
		}
		fmt.Fprintf(w, row, p.Name, strconv.Itoa(p.PID), mibText(p.StartKB), after, mibText(p.PeakKB), mibText(p.EndKB), slopeText, verdict)
	}
	for _, p := range r.Profiles {
		fmt.Fprintf(w, "  cpu profile %s\n", p)
	}
	if r.Dir != "" {
		fmt.Fprintf(w, "  logs and store kept in %s\n", r.Dir)
	}
	fmt.Fprintf(w, "meets every target: %v\n", r.MeetsTargets)
}

// durationText is d as flags take it, "" for 0.
func durationText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func mibText(kb int64) string { return fmt.Sprintf("%.1f", float64(kb)/1024) }

// limitMark is okMark for a figure with a ceiling.
func limitMark(ok bool) string {
	if ok {
		return "ok"
	}
	return "OVER LIMIT"
}

// passMark is okMark for a check.
func passMark(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAILED"
}
