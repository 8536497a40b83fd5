package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// makerBin is the binary TestMain built.
var makerBin string

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "maker-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	makerBin = filepath.Join(dir, "maker")
	if err := buildMaker(makerBin); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build maker:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: goroutines leaked:", err)
			return 1
		}
	}
	return code
}

// buildMaker builds cmd/maker (without -race: the binary is the system
// under test, the race detector watches the test process) to out.
func buildMaker(out string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return err
	}
	cmd := exec.Command(goTool, "build", "-o", out, "./cmd/maker")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v\n%s", err, b)
	}
	return nil
}

// moduleRoot walks up from the test's directory to makerfleet's go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/makerfleet/makerfleet\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod of github.com/makerfleet/makerfleet not found above the test directory")
		}
		dir = parent
	}
}

// proc is one process of the binary under test.
type proc struct {
	t       testing.TB
	name    string
	cmd     *exec.Cmd
	outPath string
	errPath string
	done    chan struct{} // closed once the process has been waited for
	waitErr error         // read after done
	exitAt  atomic.Int64  // unix nanos of the exit, read after done
}

var procSeq atomic.Int64

// startProc starts the binary with args in its own process group. Its
// stdout and stderr go to files; at cleanup the whole group is killed, the
// test checks no member survives, and on failure both outputs are logged.
func startProc(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	n := procSeq.Add(1)
	p := &proc{
		t: t, name: name,
		outPath: filepath.Join(dir, fmt.Sprintf("%02d-%s.stdout", n, name)),
		errPath: filepath.Join(dir, fmt.Sprintf("%02d-%s.stderr", n, name)),
		done:    make(chan struct{}),
	}
	stdout, err := os.Create(p.outPath)
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(p.errPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(makerBin, args...)
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	p.cmd.Env = childEnv()
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = p.cmd.Start()
	stdout.Close()
	stderr.Close()
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		p.exitAt.Store(time.Now().UnixNano())
		close(p.done)
	}()
	t.Cleanup(func() {
		p.killGroup()
		if t.Failed() {
			p.dump()
		}
	})
	return p
}

// childEnv is the environment without the settings that change the
// binary's defaults, so the tests see only the flags they pass.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MAKER_") || strings.HasPrefix(kv, "OPENAI_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// killGroup SIGKILLs the process group, waits for the process, and checks
// that no member of the group is left running.
func (p *proc) killGroup() {
	pgid := p.cmd.Process.Pid // Setpgid: the group id is the leader's pid
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Errorf("%s (pid %d) not reaped 10s after SIGKILL", p.name, pgid)
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			p.t.Errorf("%s: process group %d still has live members after SIGKILL", p.name, pgid)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// groupAlive reports whether process group pgid has a member that is not a
// zombie waiting for its parent to reap it.
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true // no /proc: kill(2) says the group exists
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			return true
		}
	}
	return false
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// signal sends sig to the process (not its group).
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := syscall.Kill(p.pid(), sig); err != nil {
		p.t.Fatalf("signal %v to %s: %v", sig, p.name, err)
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to timeout for the process to end and returns its exit
// code (-1 if a signal ended it); it fails the test on timeout.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s still running after %s", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// exitTime is when the process ended; call after wait.
func (p *proc) exitTime() time.Time { return time.Unix(0, p.exitAt.Load()) }

func (p *proc) stdout() string { b, _ := os.ReadFile(p.outPath); return string(b) }
func (p *proc) stderr() string { b, _ := os.ReadFile(p.errPath); return string(b) }

// dump logs the tail of the process's output.
func (p *proc) dump() {
	const max = 16 << 10
	tail := func(s string) string {
		if len(s) > max {
			return "…" + s[len(s)-max:]
		}
		return s
	}
	state := "running"
	if p.exited() {
		state = p.cmd.ProcessState.String()
	}
	p.t.Logf("---- %s (%s) %s\n---- stdout:\n%s\n---- stderr:\n%s", p.name, strings.Join(p.cmd.Args[1:], " "), state,
		tail(p.stdout()), tail(p.stderr()))
}

// result is a finished command.
type result struct {
	code           int
	stdout, stderr string
}

// runMaker runs the binary to its end (at most timeout).
func runMaker(t testing.TB, timeout time.Duration, args ...string) result {
	t.Helper()
	name := "maker"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name = args[0]
	}
	p := startProc(t, name, args...)
	code := p.wait(timeout)
	return result{code: code, stdout: p.stdout(), stderr: p.stderr()}
}

// waitFor polls cond every few milliseconds until it holds, failing the
// test after timeout or as soon as one of watch has exited.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool, watch ...*proc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		for _, p := range watch {
			if p.exited() {
				t.Fatalf("waiting for %s: %s exited: %v", what, p.name, p.cmd.ProcessState)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not after %s", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// httpc never keeps connections, so no transport goroutine outlives a test.
var httpc = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// sim is a running `maker simllm`.
type sim struct {
	*proc
	url string // base URL with /v1
}

var listenRE = regexp.MustCompile(`simllm listening on (http://\S+/v1)`)

// startSim starts `maker simllm` on a free port (the binary picks it and
// prints it) and waits until GET /v1/models answers.
func startSim(t testing.TB, name string, args ...string) *sim {
	t.Helper()
	p := startProc(t, name, append([]string{"simllm", "--addr", "127.0.0.1:0"}, args...)...)
	s := &sim{proc: p}
	waitFor(t, 15*time.Second, name+" to print its address", func() bool {
		m := listenRE.FindStringSubmatch(p.stderr())
		if m != nil {
			s.url = m[1]
		}
		return m != nil
	}, p)
	waitFor(t, 15*time.Second, name+" to serve /v1/models", func() bool {
		resp, err := httpc.Get(s.url + "/models")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	}, p)
	return s
}

// simStats mirrors simllm.Stats as served on /sim/stats.
type simStats struct {
	Requests     int64 `json:"requests"`
	Completions  int64 `json:"completions"`
	RateLimited  int64 `json:"rate_limited"`
	ServerErrors int64 `json:"server_errors"`
	BadRequests  int64 `json:"bad_requests"`
	Unauthorized int64 `json:"unauthorized"`
	Canceled     int64 `json:"canceled"`
}

// inFlight counts chat requests that arrived and have not been answered.
func (s simStats) inFlight() int64 {
	return s.Requests - s.Completions - s.RateLimited - s.ServerErrors - s.BadRequests - s.Unauthorized - s.Canceled
}

func (s *sim) stats(t testing.TB) simStats {
	t.Helper()
	resp, err := httpc.Get(strings.TrimSuffix(s.url, "/v1") + "/sim/stats")
	if err != nil {
		t.Fatalf("%s stats: %v", s.name, err)
	}
	defer resp.Body.Close()
	var st simStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("%s stats: %v", s.name, err)
	}
	return st
}

// parseJSONOnly decodes out, which must hold exactly one JSON value and
// nothing else but white space, into a generic map.
func parseJSONOnly(t testing.TB, out string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	if rest, _ := io.ReadAll(dec.Buffered()); strings.TrimSpace(string(rest)) != "" || dec.More() {
		t.Fatalf("stdout holds more than the JSON object: %q", rest)
	}
	return m
}

// parseReport checks stdout is exactly one job report, valid by its schema,
// with every field the report always carries.
func parseReport(t testing.TB, out string) schemas.JobReport {
	t.Helper()
	m := parseJSONOnly(t, out)
	for _, k := range reportKeys() {
		if _, ok := m[k]; !ok {
			t.Errorf("report lacks field %q", k)
		}
	}
	var rep schemas.JobReport
	if err := schemas.Decode([]byte(out), &rep); err != nil {
		t.Fatalf("report does not decode as a valid job report: %v\n%s", err, out)
	}
	return rep
}

// reportKeys are the JSON names of every JobReport field without
// omitempty, plus the ones the e2e brief names explicitly.
func reportKeys() []string {
	keys := []string{
		"solved", "steps", "errors", "samples", "votes", "red_flagged", "wasted_samples", "wall_seconds",
		"steps_per_second", "samples_per_step", "expected_samples_per_step", "trace_sha256",
		"duplicate_results", "late_samples", "resampled",
	}
	var walk func(reflect.Type)
	walk = func(rt reflect.Type) {
		for i := 0; i < rt.NumField(); i++ {
			f := rt.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" || strings.Contains(opts, "omitempty") {
				continue
			}
			keys = append(keys, name)
		}
	}
	walk(reflect.TypeOf(schemas.JobReport{}))
	return keys
}

// goldenTrace is the trace_sha256 of the true solution of n disks: the
// canonical vote key of every strategy move with its true next state, one
// per line, each followed by "\n".
func goldenTrace(t testing.TB, n int) string {
	t.Helper()
	start := make([]int, n)
	for i := range start {
		start[i] = n - i
	}
	pegs := hanoi.Pegs{start, {}, {}}
	var prev *hanoi.Move
	h := sha256.New()
	steps := 1<<n - 1
	for i := 0; i < steps; i++ {
		m, err := hanoi.StrategyMove(pegs, prev, n)
		if err != nil {
			t.Fatalf("golden trace, step %d: %v", i, err)
		}
		next, err := hanoi.Apply(pegs, m)
		if err != nil {
			t.Fatalf("golden trace, step %d: %v", i, err)
		}
		fmt.Fprintf(h, "%s\n", hanoi.Answer{Move: m, NextState: next}.Key())
		pegs, prev = next, &m
	}
	if len(pegs[0]) != 0 || len(pegs[1]) != 0 || len(pegs[2]) != n {
		t.Fatalf("golden trace of %d disks does not end on peg 2: %v", n, pegs)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// opTimeout bounds one call to NATS from the test.
const opTimeout = 10 * time.Second

// opCtx is the context of one call to NATS from the test.
func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}
