package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/makerfleet/makerfleet/internal/app/fleet"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/schemas"
)

// What maker run adds for long jobs (issue "The paper's million steps"):
// a store on a real disk, a deadline that still ends in a report, the
// decided trace written out, and the process's memory over the steps.

// ExitTimeout: maker run's --timeout ended the job first. The job was
// cancelled at a step boundary and its (partial) report printed. 124 is
// what coreutils timeout(1) exits with.
const ExitTimeout = 124

// errTimedOut: --timeout ended the job; the report printed is partial.
type errTimedOut struct {
	job     string
	timeout time.Duration
	rep     schemas.JobReport
}

func (e errTimedOut) Error() string {
	return fmt.Sprintf("job %s did not finish within --timeout %s: cancelled at step %d of %d (the report above is partial)",
		e.job, e.timeout, e.rep.Steps, e.rep.TotalSteps)
}

// runExtras are maker run's options for long jobs.
type runExtras struct {
	// timeout, when > 0, cancels the job that long after the command
	// started; the report of the cancelled job is still returned.
	timeout time.Duration
	// traceFile, when set, receives the decided trace: each decided
	// step's vote key on a line, in step order (what the report's
	// trace_sha256 hashes), read back from the job's journal.
	traceFile string
	// memEvery, when > 0, writes the process's memory to mem every that
	// many decided steps, and a summary at the end.
	memEvery int64
	mem      io.Writer
	// cpuProfile and memProfile, when set, receive a CPU profile of the
	// job and a heap profile at its end.
	cpuProfile, memProfile string
}

// profile starts x's CPU profile; the returned func stops it and writes
// the heap profile.
func (x runExtras) profile() (func() error, error) {
	var stopCPU func() error
	if x.cpuProfile != "" {
		f, err := os.Create(x.cpuProfile)
		if err != nil {
			return nil, usagef("--cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return nil, err
		}
		stopCPU = func() error { pprof.StopCPUProfile(); return f.Close() }
	}
	return func() error {
		var err error
		if stopCPU != nil {
			err = stopCPU()
		}
		if x.memProfile == "" {
			return err
		}
		f, ferr := os.Create(x.memProfile)
		if ferr != nil {
			return errors.Join(err, fmt.Errorf("--memprofile: %w", ferr))
		}
		runtime.GC()
		return errors.Join(err, pprof.WriteHeapProfile(f), f.Close())
	}, nil
}

// cancelGrace bounds how long a job cancelled at the timeout may take to
// reach its step boundary and publish its report.
const cancelGrace = 10 * time.Second

// waitOrCancel waits for the job's report until deadline; then it cancels
// the job and waits (up to cancelGrace) for the report of the cancelled
// job, returned with errTimedOut.
func waitOrCancel(ctx context.Context, f *fleet.Fleet, spec *schemas.JobSpec, deadline time.Time, x runExtras,
	onStatus func(schemas.JobStatus)) (schemas.JobReport, error) {
	wctx := ctx
	if x.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	type result struct {
		rep schemas.JobReport
		err error
	}
	// The last status seen: the partial report of a job that cannot be
	// cancelled in time.
	var (
		lastMu sync.Mutex
		last   *schemas.JobStatus
	)
	watch := func(st schemas.JobStatus) {
		lastMu.Lock()
		last = &st
		lastMu.Unlock()
		if onStatus != nil {
			onStatus(st)
		}
	}
	wait := func(c context.Context) (schemas.JobReport, error) {
		done := make(chan result, 1)
		go func() {
			rep, err := jobs.Wait(c, f.Topo, spec.Tenant, spec.JobID, watch)
			done <- result{rep, err}
		}()
		select {
		case r := <-done:
			return r.rep, r.err
		case err := <-f.Failed():
			return schemas.JobReport{}, fmt.Errorf("%w: %w", errFleet, err)
		}
	}
	rep, err := wait(wctx)
	if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		return rep, err
	}
	// The deadline: cancel the job and take its report, the figures so far.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelGrace)
	defer cancel()
	// A job that cannot be cancelled, or gives no report in the grace,
	// still ends the command as a timeout, with what its status said.
	partial := func(why string) (schemas.JobReport, error) {
		rep := schemas.JobReport{Tenant: spec.Tenant, JobID: spec.JobID, Task: spec.Task, TaskVersion: spec.TaskVersion,
			Params: spec.Params, ParamsRef: spec.ParamsRef, K: spec.K, State: schemas.StateCancelled, Reason: why}
		lastMu.Lock()
		if st := last; st != nil {
			rep.Steps, rep.TotalSteps, rep.Errors = st.Steps, st.TotalSteps, st.Errors
			rep.Samples, rep.Votes, rep.RedFlagged = st.Samples, st.Votes, st.RedFlagged
		}
		lastMu.Unlock()
		return rep, errTimedOut{job: spec.JobID, timeout: x.timeout, rep: rep}
	}
	if _, err := jobs.Control(cctx, f.Topo, spec.Tenant, spec.JobID, schemas.ControlCancel); err != nil && !errors.Is(err, jobs.ErrFinished) {
		return partial(fmt.Sprintf("did not finish within --timeout %s, and cancelling it failed: %v", x.timeout, err))
	}
	rep, err = wait(cctx)
	if err != nil {
		return partial(fmt.Sprintf("did not finish within --timeout %s; no report within %s of cancelling it: %v", x.timeout, cancelGrace, err))
	}
	if rep.State != schemas.StateCancelled {
		return rep, nil // it ended on its own as the timeout came
	}
	return rep, errTimedOut{job: spec.JobID, timeout: x.timeout, rep: rep}
}

// writeTrace writes the job's decided trace to path, one vote key a line
// in step order, read from the journal, and checks it hashes to the
// report's trace_sha256.
func writeTrace(ctx context.Context, f *fleet.Fleet, rep schemas.JobReport, path string) error {
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--trace-file: %w", err)
	}
	w := bufio.NewWriterSize(out, 1<<20)
	h := sha256.New()
	next := int64(0)
	err = journal.ReadAll(ctx, f.JS, f.Bus.Namespace, rep.Tenant, rep.JobID, func(e journal.Entry) error {
		if e.Type != schemas.EntryDecision && e.Type != schemas.EntryArbiter {
			return nil
		}
		if e.Step != next {
			return fmt.Errorf("journal: decision for step %d where step %d was expected", e.Step, next)
		}
		next++
		line := append([]byte(e.VoteKey), '\n')
		h.Write(line)
		_, err := w.Write(line)
		return err
	})
	if err == nil {
		err = w.Flush()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--trace-file %s: %w", path, err)
	}
	if sum := fmt.Sprintf("%x", h.Sum(nil)); rep.TraceSHA256 != "" && sum != rep.TraceSHA256 {
		return fmt.Errorf("--trace-file %s: %d steps hash to %s, the report says %s", path, next, sum, rep.TraceSHA256)
	}
	return nil
}

// memSample is the process's memory at a step.
type memSample struct {
	step               int64
	at                 time.Duration
	rss, heap, storeSz int64 // bytes: resident set, live Go heap, the store dir on disk
}

// memWatch samples the process's memory every few decided steps.
type memWatch struct {
	every    int64
	w        io.Writer
	storeDir string
	// profile, when set, receives a heap profile at each sample, in
	// profile.<step> (for go tool pprof -base).
	profile string
	start   time.Time
	next    int64
	samples []memSample
}

func newMemWatch(every int64, w io.Writer, storeDir, profile string) *memWatch {
	if every <= 0 || w == nil {
		return nil
	}
	return &memWatch{every: every, w: w, storeDir: storeDir, profile: profile, start: time.Now(), next: every}
}

// onStatus wraps a status callback with the sampling.
func (mw *memWatch) onStatus(inner func(schemas.JobStatus)) func(schemas.JobStatus) {
	if mw == nil {
		return inner
	}
	return func(st schemas.JobStatus) {
		if inner != nil {
			inner(st)
		}
		if st.Steps >= mw.next {
			mw.take(st.Steps)
			mw.next = (st.Steps/mw.every + 1) * mw.every
		}
	}
}

func (mw *memWatch) take(step int64) {
	// The live heap: garbage not yet collected says nothing of growth.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSample{step: step, at: time.Since(mw.start), rss: processRSS(), heap: int64(ms.HeapAlloc), storeSz: dirSize(mw.storeDir)}
	mw.samples = append(mw.samples, s)
	if mw.profile != "" {
		name := mw.profile + "." + strconv.FormatInt(step, 10)
		f, err := os.Create(name)
		if err == nil {
			err = pprof.WriteHeapProfile(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(mw.w, "mem: heap profile %s not written: %v\n", name, err)
		}
	}
	fmt.Fprintf(mw.w, "mem: step %d  %s  rss %.1f MiB  go heap live %.1f MiB  store on disk %.1f MiB\n",
		s.step, s.at.Round(time.Second), mib(s.rss), mib(s.heap), mib(s.storeSz))
}

// summary takes a last sample at the job's end (steps decided) and writes
// how memory grew per 1,000 steps from the second sample (the first
// follows the warm-up) to the last.
func (mw *memWatch) summary(steps int64) {
	if mw == nil {
		return
	}
	if n := len(mw.samples); n == 0 || mw.samples[n-1].step < steps {
		mw.take(steps)
	}
	first, last := 0, len(mw.samples)-1
	if last >= 2 && mw.samples[1].step < mw.samples[last].step {
		first = 1
	}
	a, b := mw.samples[first], mw.samples[last]
	if b.step <= a.step {
		return
	}
	per := func(x, y int64) float64 { return float64(y-x) / 1024 / (float64(b.step-a.step) / 1000) }
	fmt.Fprintf(mw.w, "mem: steps %d to %d: rss %+.1f KB per 1,000 steps (max %.1f MiB), go heap %+.1f KB per 1,000 steps, store on disk %+.1f KB per 1,000 steps\n",
		a.step, b.step, per(a.rss, b.rss), mib(maxRSS(mw.samples)), per(a.heap, b.heap), per(a.storeSz, b.storeSz))
}

func maxRSS(s []memSample) int64 {
	var m int64
	for _, x := range s {
		m = max(m, x.rss)
	}
	return m
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// processRSS is this process's resident set (VmRSS) in bytes; 0 where
// /proc is not there.
func processRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, _ := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte("kB")))), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// dirSize is the bytes of the files under dir; 0 without one.
func dirSize(dir string) int64 {
	if dir == "" {
		return 0
	}
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// runStorePrefix starts the name of maker run's store: maker-run-<pid>-.
const runStorePrefix = "maker-run-"

// runStoreDir is the embedded nats-server's data dir for maker run: the
// one --data-dir names, else a new directory under the system temp dir (a
// disk, not /dev/shm: a long job's journal grows about 0.7 KB a step),
// removed by the returned func unless keep. Stores of runs that died
// without removing theirs (their pid is gone) are removed first.
func runStoreDir(dataDir string, keep bool, stderr io.Writer) (dir string, cleanup func(), err error) {
	if dataDir != "" {
		return dataDir, func() {}, nil
	}
	removeDeadStores(os.TempDir())
	// A store to keep is named without the pid: no later run removes it.
	name := runStorePrefix + strconv.Itoa(os.Getpid()) + "-"
	if keep {
		name = runStorePrefix + "kept-"
	}
	dir, err = os.MkdirTemp(os.TempDir(), name)
	if err != nil {
		return "", nil, err
	}
	if keep {
		return dir, func() { fmt.Fprintf(stderr, "maker: the run's store is kept in %s\n", dir) }, nil
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// removeDeadStores removes maker-run-<pid>-* under dir whose process is
// gone.
func removeDeadStores(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), runStorePrefix)
		pidText, _, ok2 := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || !ok2 || err != nil || pid <= 0 || pid == os.Getpid() || !e.IsDir() {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil && p.Signal(syscall.Signal(0)) == nil {
			continue // still running
		}
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}
