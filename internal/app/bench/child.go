package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A child is one process of maker bench --processes' fleet: started in a
// process group of its own (a Ctrl-C at the terminal reaches the bench,
// which stops the fleet in order, not every process at once) and, on
// Linux, killed by the kernel if the bench dies first (childAttr). Its
// stdout and stderr go to one log file; ready says a line of it matched
// the pattern that says the process is up.
type child struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has been waited for
	waitErr error         // read after exited
	// ready is closed with the first line matching the ready pattern;
	// match holds the pattern's submatches.
	ready chan struct{}
	match []string
}

// childStopGrace bounds how long a child may take to stop after SIGTERM
// before it is killed.
const childStopGrace = 20 * time.Second

// startChild starts path with args, its output to logPath, and watches
// for a line matching readyRE (nil: ready at once).
func startChild(name, path, logPath string, env []string, readyRE *regexp.Regexp, args ...string) (*child, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c := &child{name: name, logPath: logPath, exited: make(chan struct{}), ready: make(chan struct{})}
	w := &readyWriter{file: logFile, re: readyRE, found: func(m []string) { c.match = m; close(c.ready) }}
	if readyRE == nil {
		close(c.ready)
		w.found = nil
	}
	c.cmd = exec.Command(path, args...)
	c.cmd.Stdout, c.cmd.Stderr = w, w
	c.cmd.Env = env
	c.cmd.SysProcAttr = childAttr()
	if err := c.cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	// Owned: ends with the process (Wait also waits for the copying of
	// its output into w).
	go func() {
		c.waitErr = c.cmd.Wait()
		_ = logFile.Close()
		close(c.exited)
	}()
	return c, nil
}

// childEnv is this environment without the settings that change maker's
// defaults: the fleet is the bench's own, and its flags say all of it.
// gomaxprocs > 0 sets GOMAXPROCS in it.
func childEnv(gomaxprocs int) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MAKER_") || strings.HasPrefix(kv, "OPENAI_") ||
			(gomaxprocs > 0 && strings.HasPrefix(kv, "GOMAXPROCS=")) {
			continue
		}
		env = append(env, kv)
	}
	if gomaxprocs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(gomaxprocs))
	}
	return env
}

// ChildGoMaxProcsFor is the default ProcessesConfig.ChildGoMaxProcs for a
// fleet of goProcesses Go processes on cpus CPUs, with env the GOMAXPROCS
// of this environment: one thread each when they outnumber the CPUs,
// since every hop of a step wakes a thread of another process and a
// second thread each only adds contention there (docs/benchmarks.md: 865
// against 700 steps/s, six processes on two CPUs); else, or when env sets
// GOMAXPROCS, 0 (the environment's, the runtime's default).
func ChildGoMaxProcsFor(goProcesses, cpus int, env string) int {
	if env != "" || goProcesses <= cpus {
		return 0
	}
	return 1
}

// effectiveChildGoMaxProcs is the GOMAXPROCS the children run with, for
// the report: set, else the environment's, else 0 (the runtime's default).
func effectiveChildGoMaxProcs(set int) int {
	if set > 0 {
		return set
	}
	n, err := strconv.Atoi(os.Getenv("GOMAXPROCS"))
	if err != nil || n < 1 {
		return 0
	}
	return n
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// waitReady waits for c's ready line; c exiting first, ctx ending or
// timeout passing is an error with the tail of its log.
func (c *child) waitReady(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.ready:
		return nil
	case <-c.exited:
		// The ready line may have come with the exit.
		select {
		case <-c.ready:
			return nil
		default:
		}
		return c.died()
	case <-t.C:
		return fmt.Errorf("%s (pid %d) not ready after %s%s", c.name, c.pid(), timeout, c.tail())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// logMatch is the submatches of the first line of c's log matching re
// (nil: none yet).
func (c *child) logMatch(re *regexp.Regexp) []string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return nil
	}
	return re.FindStringSubmatch(string(b))
}

// died is the error of a child that exited when it should not have.
func (c *child) died() error {
	return fmt.Errorf("%s (pid %d) exited: %v%s", c.name, c.pid(), c.waitErr, c.tail())
}

// tail is the end of c's log, to show with an error.
func (c *child) tail() string {
	const max = 3 << 10
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b, "\n")
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return fmt.Sprintf("; the end of its log (%s):\n%s", c.logPath, b)
}

// stop asks c to stop (SIGTERM: services end gracefully, and the roles
// write their --cpuprofile) and kills it after grace.
func (c *child) stop(grace time.Duration) {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.exited:
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// readyWriter writes a child's output to its log file and calls found
// once, with the submatches of the first whole line matching re.
type readyWriter struct {
	file  io.Writer
	re    *regexp.Regexp
	found func([]string)

	mu      sync.Mutex
	partial []byte
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// The log first: what a found line announces is in the file by then.
	n, err := w.file.Write(p)
	if w.found != nil {
		w.partial = append(w.partial, p...)
		for {
			i := bytes.IndexByte(w.partial, '\n')
			if i < 0 {
				break
			}
			if m := w.re.FindSubmatch(w.partial[:i]); m != nil {
				s := make([]string, len(m))
				for j := range m {
					s[j] = string(m[j])
				}
				w.found(s)
				w.found, w.partial = nil, nil
				break
			}
			w.partial = w.partial[i+1:]
		}
	}
	return n, err
}
