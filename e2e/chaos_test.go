//go:build chaos

// The fault suite (`make chaos`): real processes (coordinators, voters, the
// simulated model, redis-server) on a nats-server that can be restarted,
// with faults injected by PID, by Redis command, through a TCP proxy in
// front of Redis, and on the wire. Every scenario checks the same oracle:
//
//	(a) the journal holds exactly one decision per step, and its trace is
//	    the fault-free golden trace (the true solution for this seed);
//	(b) every decision was counted from unique votes with margin >= k;
//	(c) nothing is left in the job's streams or un-acked outside the DLQ;
//	(d) the report's samples account for the simulated model's answers.

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/journal"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// chaosTally is the suite's summary, printed by TestChaosSummary.
var chaosTally struct {
	sync.Mutex
	faults     map[string]int
	duplicates int64 // duplicated results injected
	ignored    int64 // duplicate results the tally ignored
	jobs       int
	decisions  int64
	lost       int64
}

func noteFault(name string) {
	chaosTally.Lock()
	defer chaosTally.Unlock()
	if chaosTally.faults == nil {
		chaosTally.faults = map[string]int{}
	}
	chaosTally.faults[name]++
}

// redisProc is a redis-server on a fixed port that can be killed and
// started again empty (persistence off), as a crashed Redis.
type redisProc struct {
	port int
	dir  string
	cmd  *exec.Cmd
}

func startRedisProc(t *testing.T) *redisProc {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed")
	}
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &redisProc{port: port, dir: t.TempDir()}
	r.start(t)
	t.Cleanup(r.kill)
	return r
}

func (r *redisProc) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

func (r *redisProc) start(t *testing.T) {
	t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis.log"))
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.addr()})
	defer rdb.Close()
	waitFor(t, 10*time.Second, "redis-server up", func() bool {
		return rdb.Ping(context.Background()).Err() == nil
	})
}

func (r *redisProc) kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// restartEmpty kills Redis and starts it again with nothing in it.
func (r *redisProc) restartEmpty(t *testing.T) {
	t.Helper()
	r.kill()
	r.start(t)
}

// faultProxy forwards TCP to a backend; while drop > 0 it loses that share
// of the backend's replies by closing the connection instead (the command
// ran, the client never hears).
type faultProxy struct {
	ln      net.Listener
	backend string
	drop    atomic.Uint64 // math.Float64bits of the share
	dropped atomic.Int64
	wg      sync.WaitGroup
}

func startProxy(t *testing.T, backend string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, backend: backend}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

func (p *faultProxy) setDrop(share float64) { p.drop.Store(uint64(share * 1e6)) }

func (p *faultProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(c)
		}()
	}
}

func (p *faultProxy) pipe(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(server, client)
		done <- struct{}{}
	}()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				if share := float64(p.drop.Load()) / 1e6; share > 0 && rand.Float64() < share {
					p.dropped.Add(1)
					client.Close() // the reply is lost; the command has run
					break
				}
				if _, werr := client.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
}

// chaosFleet is one scenario's fleet.
type chaosFleet struct {
	t      *testing.T
	nats   *restartableNATS
	redis  *redisProc
	proxy  *faultProxy
	model  *sim
	nc     *nats.Conn
	js     jetstream.JetStream
	svc    *services
	coords []*proc
	voters []*proc
	seq    int
}

type chaosOpts struct {
	simArgs   []string // extra `maker simllm` flags
	voterArgs []string
	coords    int // started at once (default 2)
}

func newChaosFleet(t *testing.T, o chaosOpts) *chaosFleet {
	t.Helper()
	f := &chaosFleet{t: t, nats: startRestartableNATS(t), redis: startRedisProc(t)}
	f.proxy = startProxy(t, f.redis.addr())
	nc, err := nats.Connect(f.nats.url, nats.Name("chaos"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	f.nc = nc
	if f.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	f.svc = &services{natsURL: f.nats.url, redisURL: "redis://" + f.proxy.addr() + "/0", nc: nc, js: f.js}
	f.model = startSim(t, "simllm", append([]string{"--accuracy", "0.9", "--seed", "7", "--latency", "2ms"}, o.simArgs...)...)
	if o.coords == 0 {
		o.coords = 2
	}
	for range max(o.coords, 0) {
		f.startCoordinator()
	}
	if o.coords < 0 {
		// No coordinator yet to create the topology the voters wait for:
		// the operator's part (maker topology create).
		ctx, cancel := opCtx()
		_, err := topology.Ensure(ctx, f.js, topology.Config{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		f.startVoter(o.voterArgs...)
	}
	waitFor(t, 30*time.Second, "the fleet pulling", func() bool {
		return f.waiting(bus.DefaultNamespace.SamplesStream(), bus.ConsumerVoters) >= len(f.voters) &&
			(o.coords < 0 || f.waiting(bus.DefaultNamespace.JobsStream(), bus.ConsumerCoordinators) >= 1)
	})
	return f
}

func (f *chaosFleet) waiting(stream, consumer string) int {
	ctx, cancel := opCtx()
	defer cancel()
	c, err := f.js.Consumer(ctx, stream, consumer)
	if err != nil {
		return 0
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0
	}
	return info.NumWaiting
}

func (f *chaosFleet) startCoordinator(extra ...string) *proc {
	f.seq++
	name := fmt.Sprintf("coordinator-%d", f.seq)
	p := f.svc.startCoordinator(f.t, name, append([]string{"--lease-ttl", "2s", "--checkpoint-every", "25"}, extra...)...)
	f.coords = append(f.coords, p)
	return p
}

func (f *chaosFleet) startVoter(extra ...string) *proc {
	f.seq++
	p := f.svc.startVoter(f.t, fmt.Sprintf("voter-%d", f.seq), f.model.url, append([]string{"--concurrency", "4"}, extra...)...)
	f.voters = append(f.voters, p)
	return p
}

// submit starts `maker submit --wait` for a job of disks. Without
// speculation: the crash points name a step's waves, which a step adopted
// from speculation does not publish, and the accounting below counts each
// answer exactly (TestChaosSpeculation runs a fault with it).
func (f *chaosFleet) submit(jobID string, disks int) *proc {
	return startProc(f.t, "submit-"+jobID, submitArgs(f.nats.url, disks, 3, 7, "--job-id", jobID, "--sample-timeout", "1500ms", "--timeout", "90m", "--speculation-depth", "0")...)
}

// waitSteps waits until the job decided at least n steps.
func (f *chaosFleet) waitSteps(jobID string, n int64, watch ...*proc) schemas.JobStatus {
	var st schemas.JobStatus
	waitFor(f.t, 120*time.Second, fmt.Sprintf("%s at step %d", jobID, n), func() bool {
		s, ok := f.svc.status(f.t, jobID)
		st = s
		return ok && s.Steps >= n
	}, watch...)
	return st
}

// owner returns the process of the coordinator running jobID.
func (f *chaosFleet) owner(jobID string) *proc {
	st, _ := f.svc.status(f.t, jobID)
	for _, p := range f.coords {
		if p.name == st.Coordinator && !p.exited() {
			return p
		}
	}
	f.t.Fatalf("no live coordinator named %q owns %s", st.Coordinator, jobID)
	return nil
}

// finish waits for the submit and checks the oracle.
func (f *chaosFleet) finish(sub *proc, jobID string, disks int) schemas.JobReport {
	f.t.Helper()
	if code := sub.wait(90 * time.Minute); code != 0 {
		f.t.Fatalf("submit exited %d: %s", code, sub.stderr())
	}
	rep := parseReport(f.t, sub.stdout())
	f.oracle(jobID, disks, rep)
	return rep
}

// goldenRuns caches fault-free runs by disks.
var goldenRuns sync.Map

// goldenRun is the fault-free run of the suite's job: `maker run` in one
// process, same task, k, seed and model accuracy. Answers are a function of
// the seed and the request and votes count in index order, so a run under
// faults must decide every step as it does and count the same samples.
func goldenRun(t *testing.T, disks int) schemas.JobReport {
	t.Helper()
	if v, ok := goldenRuns.Load(disks); ok {
		return v.(schemas.JobReport)
	}
	res := runMaker(t, 20*time.Minute, "run", "--task", "hanoi", "--disks", strconv.Itoa(disks), "--k", "3",
		"--sim-accuracy", "0.9", "--seed", "7", "--json", "--quiet")
	if res.code != 0 {
		t.Fatalf("fault-free run exited %d: %s", res.code, res.stderr)
	}
	rep := parseReport(t, res.stdout)
	goldenRuns.Store(disks, rep)
	return rep
}

func (f *chaosFleet) oracle(jobID string, disks int, rep schemas.JobReport) {
	t := f.t
	t.Helper()
	g := goldenRun(t, disks)
	total := g.Steps
	golden := g.TraceSHA256
	if rep.State != g.State || rep.Steps != g.Steps || rep.Errors != g.Errors || rep.TraceSHA256 != golden {
		t.Errorf("report: state %s, steps %d, errors %d, trace %s; the fault-free run: %s, %d, %d, %s",
			rep.State, rep.Steps, rep.Errors, rep.TraceSHA256, g.State, g.Steps, g.Errors, golden)
	}
	if g.Solved && golden != goldenTrace(t, disks) {
		t.Errorf("the fault-free run solved the task with a trace other than the true solution's")
	}
	// (b) every vote counted once: a vote counted twice, or one lost, would
	// move some step's decision point and change these.
	if rep.Samples != g.Samples || rep.Votes != g.Votes || rep.RedFlagged != g.RedFlagged {
		t.Errorf("(b) counted %d samples (%d votes, %d red flags); the fault-free run %d (%d, %d)",
			rep.Samples, rep.Votes, rep.RedFlagged, g.Samples, g.Votes, g.RedFlagged)
	}
	checkAccounting(t, rep)

	// (a) and (b): the journal.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	h := sha256.New()
	var next, takeovers int64
	var lastToken int64
	err := journal.ReadAll(ctx, f.js, bus.DefaultNamespace, schemas.DefaultTenant, jobID, func(e journal.Entry) error {
		if e.Type == schemas.EntryEnd {
			if e.State != rep.State || e.Step != total {
				return fmt.Errorf("end entry at %d: state %s at step %d, want %s at %d", e.Seq, e.State, e.Step, rep.State, total)
			}
			return nil
		}
		if e.Type == schemas.EntryTakeover {
			takeovers++
			if e.Token <= lastToken {
				return fmt.Errorf("takeover at %d has token %d after token %d", e.Seq, e.Token, lastToken)
			}
			lastToken = e.Token
			return nil
		}
		if e.Token != lastToken {
			return fmt.Errorf("decision of step %d under token %d, but token %d had taken over", e.Step, e.Token, lastToken)
		}
		if e.Step != next {
			return fmt.Errorf("journal entry %d decides step %d, want step %d (exactly one decision per step)", e.Seq, e.Step, next)
		}
		next++
		sum := 0
		for _, te := range e.Tally {
			sum += te.Votes
		}
		if e.Lead < rep.K || sum != e.Valid || e.Counted != e.Valid+e.RedFlagged || e.Tally[0].VoteKey != e.VoteKey || e.Tally[0].Votes != e.Votes {
			return fmt.Errorf("step %d: lead %d (k %d), tally sum %d vs valid %d, counted %d = %d + %d, winner %s/%d vs tally %v",
				e.Step, e.Lead, rep.K, sum, e.Valid, e.Counted, e.Valid, e.RedFlagged, e.VoteKey, e.Votes, e.Tally[0])
		}
		fmt.Fprintf(h, "%s\n", e.VoteKey)
		return nil
	})
	if err != nil {
		t.Errorf("(a/b) journal: %v", err)
	}
	if next != total {
		t.Errorf("(a) journal holds %d decisions, want %d", next, total)
	}
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != golden {
		t.Errorf("(a) journal trace %s, want golden %s", got, golden)
	}

	// (c): nothing left in the job's streams; nothing un-acked.
	subjects := map[string]string{
		bus.DefaultNamespace.SamplesStream(): bus.DefaultNamespace.SampleSubject(schemas.DefaultTenant, jobID),
		bus.DefaultNamespace.ResultsStream(): bus.DefaultNamespace.ResultJobWildcard(schemas.DefaultTenant, jobID),
	}
	// Results a voter publishes after the job's last owner finished (a
	// zombie's requests answered late) have no consumer: a coordinator's
	// orphan sweep removes them, once a minute. So the wait covers two
	// sweeps.
	waitFor(t, 130*time.Second, "(c) the job's streams empty and nothing un-acked", func() bool {
		ctx, cancel := opCtx()
		defer cancel()
		for stream, sj := range subjects {
			s, err := f.js.Stream(ctx, stream)
			if err != nil {
				return false
			}
			info, err := s.Info(ctx, jetstream.WithSubjectFilter(sj))
			if err != nil || len(info.State.Subjects) != 0 {
				return false
			}
		}
		c, err := f.js.Consumer(ctx, bus.DefaultNamespace.SamplesStream(), bus.ConsumerVoters)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.NumAckPending == 0
	})

	// (d): every answer the model gave is in the report: counted, late or a
	// duplicate; answers lost with a killed voter are the only gap.
	st := f.model.stats(t)
	accounted := rep.Samples + rep.LateSamples + rep.DuplicateResults + rep.SpeculativeWasted
	if st.Completions < rep.Samples {
		t.Errorf("(d) model answered %d times, but the report counts %d samples", st.Completions, rep.Samples)
	}
	t.Logf("(d) model answers %d, report accounts for %d (samples %d, late %d, duplicates %d); journal takeovers %d",
		st.Completions, accounted, rep.Samples, rep.LateSamples, rep.DuplicateResults, takeovers)

	chaosTally.Lock()
	chaosTally.jobs++
	chaosTally.decisions += next
	chaosTally.lost += max(0, total-next)
	chaosTally.ignored += rep.DuplicateResults
	chaosTally.Unlock()
}

// account checks (d): every answer the model gave is in the report,
// counted, late or a duplicate, except those a killed process held: at
// most slack of them (0 when no process was killed).
func account(t *testing.T, f *chaosFleet, rep schemas.JobReport, slack int64) {
	t.Helper()
	st := f.model.stats(t)
	accounted := rep.Samples + rep.LateSamples + rep.DuplicateResults + rep.SpeculativeWasted
	if d := st.Completions - accounted; d < 0 || d > slack {
		t.Errorf("(d) model answered %d times, report accounts for %d (samples %d, late %d, duplicates %d); allowed gap 0..%d",
			st.Completions, accounted, rep.Samples, rep.LateSamples, rep.DuplicateResults, slack)
	}
}

// killSlack bounds the answers one killed coordinator can take with it:
// the open step's, about k per wave, and a result batch in hand.
const killSlack = 20

const chaosDisks = 7

func TestChaosVoterKilled(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{simArgs: []string{"--latency", "30ms"}})
	sub := f.submit("voter-kill", chaosDisks)
	f.waitSteps("voter-kill", 30, sub)
	f.voters[0].signal(syscall.SIGKILL)
	noteFault("voter SIGKILL mid-sample")
	f.startVoter()
	f.finish(sub, "voter-kill", chaosDisks)
}

func TestChaosCoordinatorKilled(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{})
	sub := f.submit("coord-kill", chaosDisks)
	f.waitSteps("coord-kill", int64(10+rand.IntN(60)), sub)
	f.owner("coord-kill").signal(syscall.SIGKILL)
	noteFault("coordinator SIGKILL at a random step")
	f.startCoordinator()
	rep := f.finish(sub, "coord-kill", chaosDisks)
	account(t, f, rep, killSlack)
}

// TestChaosSpeculation: a job sampling 4 steps ahead loses its
// coordinator at a random step; the heir resumes from the journal (the
// held answers of the steps ahead are gone with the dead one, and asked
// again) and the job ends as the others do: every decision journaled once,
// nothing left in the streams, every answer accounted but those the dead
// coordinator took with it: its steps ahead's, and those of guesses it
// threw away since its last journal entry (a guess can change several
// times in one step), at most a few depths of first waves.
func TestChaosSpeculation(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{})
	const depth, k = 4, 3
	sub := startProc(f.t, "submit-spec", submitArgs(f.nats.url, chaosDisks, k, 7, "--job-id", "spec-kill", "--sample-timeout", "1500ms",
		"--timeout", "90m", "--speculation-depth", strconv.Itoa(depth))...)
	f.waitSteps("spec-kill", int64(10+rand.IntN(60)), sub)
	f.owner("spec-kill").signal(syscall.SIGKILL)
	noteFault("coordinator SIGKILL with speculation on")
	f.startCoordinator()
	rep := f.finish(sub, "spec-kill", chaosDisks)
	if rep.SpeculativeSamples == 0 {
		t.Errorf("nothing sampled ahead: the job did not speculate")
	}
	account(t, f, rep, killSlack+4*depth*k)
}

func TestChaosCrashPoints(t *testing.T) {
	for _, point := range []string{"after-count", "after-journal", "mid-wave"} {
		t.Run(point, func(t *testing.T) {
			f := newChaosFleet(t, chaosOpts{coords: -1})
			doomed := f.startCoordinator("--crash-at", point+":20")
			job := "crash-" + point
			sub := f.submit(job, chaosDisks)
			// The heir starts once the doomed one owns the job (it may
			// reach its crash point before a status is seen).
			waitFor(t, 30*time.Second, "the doomed coordinator to take the job", func() bool {
				st, ok := f.svc.status(t, job)
				return (ok && st.Coordinator == doomed.name) || doomed.exited()
			}, sub)
			f.startCoordinator() // the heir
			if code := doomed.wait(60 * time.Second); code != 137 {
				t.Fatalf("the doomed coordinator exited %d, want 137 at %s:20", code, point)
			}
			noteFault("coordinator crash " + point)
			rep := f.finish(sub, job, chaosDisks)
			account(t, f, rep, killSlack)
		})
	}
}

func TestChaosZombieCoordinator(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{})
	sub := f.submit("zombie", chaosDisks)
	f.waitSteps("zombie", 30, sub)
	z := f.owner("zombie")
	z.signal(syscall.SIGSTOP)
	noteFault("zombie coordinator (SIGSTOP, takeover, SIGCONT)")
	waitFor(t, 30*time.Second, "another coordinator to take the job", func() bool {
		st, ok := f.svc.status(t, "zombie")
		return ok && st.Coordinator != z.name
	}, sub)
	time.Sleep(500 * time.Millisecond)
	z.signal(syscall.SIGCONT)
	f.finish(sub, "zombie", chaosDisks)
	defer func() {
		if t.Failed() { // what the zombie said instead
			b, _ := os.ReadFile(z.errPath)
			t.Logf("the zombie's log, its last 4 KB:\n%s", b[max(0, len(b)-4096):])
		}
	}()
	// Whichever it meets first: its lease's renewal refused, its journal
	// append fenced, or another failure (the heir deleted its result
	// consumer) with the lease found lost after it.
	waitFor(t, 30*time.Second, "the zombie to notice it lost the lease", func() bool {
		b, _ := os.ReadFile(z.errPath)
		return strings.Contains(string(b), "lost the job's lease") || strings.Contains(string(b), "fenced") ||
			strings.Contains(string(b), "after its lease was lost")
	})
}

func TestChaosRedisRestartedEmpty(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{})
	sub := f.submit("redis-restart", chaosDisks)
	f.waitSteps("redis-restart", 40, sub)
	f.redis.restartEmpty(t)
	noteFault("Redis restarted empty mid-step")
	f.finish(sub, "redis-restart", chaosDisks)
}

func TestChaosScriptFlush(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{})
	sub := f.submit("script-flush", chaosDisks)
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.addr()})
	defer rdb.Close()
	for _, at := range []int64{20, 60, 100} {
		f.waitSteps("script-flush", at, sub)
		if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		noteFault("SCRIPT FLUSH mid-run")
	}
	rep := f.finish(sub, "script-flush", chaosDisks)
	account(t, f, rep, 0)
}

func TestChaosRedisReplyLost(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{})
	f.proxy.setDrop(0.03)
	sub := f.submit("reply-lost", chaosDisks)
	rep := f.finish(sub, "reply-lost", chaosDisks)
	f.proxy.setDrop(0)
	n := f.proxy.dropped.Load()
	if n == 0 {
		t.Fatal("the proxy lost no Redis reply; the scenario tested nothing")
	}
	chaosTally.Lock()
	if chaosTally.faults == nil {
		chaosTally.faults = map[string]int{}
	}
	chaosTally.faults["Redis reply lost after the command ran"] += int(n)
	chaosTally.Unlock()
	account(t, f, rep, 0)
}

func TestChaosNATSRestart(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{})
	sub := f.submit("nats-restart", chaosDisks)
	f.waitSteps("nats-restart", 40, sub)
	f.nats.restart(t)
	noteFault("NATS server restart")
	f.finish(sub, "nats-restart", chaosDisks)
}

// duplicateResults re-publishes share of the fleet's results until the
// test ends, each under a new message id (so the stream keeps it); with
// alter, half of them instead carry another vote key and no id. It returns
// the count of messages injected.
func (f *chaosFleet) duplicateResults(share float64, alter bool) *atomic.Int64 {
	f.t.Helper()
	var injected atomic.Int64
	sub, err := f.nc.Subscribe(bus.DefaultNamespace.String()+".v1.result.>", func(m *nats.Msg) {
		if rand.Float64() >= share {
			return
		}
		out := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
		if alter && rand.IntN(2) == 0 {
			var res map[string]any
			if json.Unmarshal(m.Data, &res) == nil && res["outcome"] == "vote" {
				res["vote_key"] = "0:0->1|[[],[],[]]" // altered: a key no step can take
				out.Data, _ = json.Marshal(res)
			}
		} else {
			out.Header.Set(jetstream.MsgIDHeader, "dup-"+strconv.FormatInt(rand.Int64(), 36))
		}
		if f.nc.PublishMsg(out) == nil {
			injected.Add(1)
		}
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &injected
}

// TestChaosDuplicatedResults re-publishes 5% of the results: half byte for
// byte under a new message id, half with another vote key and no id.
func TestChaosDuplicatedResults(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{})
	injected := f.duplicateResults(0.05, true)
	sub := f.submit("duplicates", chaosDisks)
	rep := f.finish(sub, "duplicates", chaosDisks)
	if injected.Load() == 0 {
		t.Fatal("no duplicate injected")
	}
	noteFault("5% of results duplicated (half altered)")
	chaosTally.Lock()
	chaosTally.duplicates += injected.Load()
	chaosTally.Unlock()
	t.Logf("injected %d duplicates; report: duplicates %d, malformed %d", injected.Load(), rep.DuplicateResults, rep.MalformedMessages)
}

func TestChaosModelErrorStorm(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{
		simArgs:   []string{"--rate-limit-rate", "0.2", "--server-error-rate", "0.1", "--latency-jitter", "150ms"},
		voterArgs: []string{"--attempt-timeout", "120ms"},
	})
	sub := f.submit("storm", chaosDisks)
	f.finish(sub, "storm", chaosDisks)
	st := f.model.stats(t)
	if st.RateLimited == 0 || st.ServerErrors == 0 {
		t.Errorf("storm: %d 429s, %d 500s; want both", st.RateLimited, st.ServerErrors)
	}
	noteFault("model error storm (429, 500, timeouts)")
}

func TestChaosPoisonRequest(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{})
	sub := f.submit("poison", chaosDisks)
	f.waitSteps("poison", 10, sub)
	if err := f.nc.Publish(bus.DefaultNamespace.SampleSubject(schemas.DefaultTenant, "poison"), []byte(`{"version":1,"kind":"sample_request","poison":true}`)); err != nil {
		t.Fatal(err)
	}
	noteFault("poison request")
	f.finish(sub, "poison", chaosDisks)
	res := runMaker(t, 30*time.Second, "dlq", "list", "--nats", f.nats.url, "--job", "poison", "--json")
	var dls []struct {
		Reason string `json:"reason"`
		Data   []byte `json:"data"`
	}
	if res.code != 0 || json.Unmarshal([]byte(res.stdout), &dls) != nil || len(dls) != 1 || dls[0].Reason != "malformed sample request" {
		t.Fatalf("dlq list: exit %d, %s; want the poison request with its reason", res.code, res.stdout)
	}
}

func TestChaosVoterConsumerRecreated(t *testing.T) {
	f := newChaosFleet(t, chaosOpts{})
	sub := f.submit("consumer", chaosDisks)
	f.waitSteps("consumer", 30, sub)
	ctx, cancel := opCtx()
	defer cancel()
	if err := f.js.DeleteConsumer(ctx, bus.DefaultNamespace.SamplesStream(), bus.ConsumerVoters); err != nil {
		t.Fatal(err)
	}
	noteFault("voters' consumer deleted and recreated")
	f.finish(sub, "consumer", chaosDisks)
}

// TestChaosMarathon runs one long job while faults of every kind hit the
// fleet in turn, a few seconds apart, until it ends: MAKER_CHAOS_DISKS
// disks (default 9 in `make chaos`; `make chaos-long` runs 15, 32,767
// steps).
func TestChaosMarathon(t *testing.T) {
	disks := 9
	if v := os.Getenv("MAKER_CHAOS_DISKS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 3 || n > 20 {
			t.Fatalf("MAKER_CHAOS_DISKS=%q: want 3..20", v)
		}
		disks = n
	}
	f := newChaosFleet(t, chaosOpts{})
	injected := f.duplicateResults(0.05, false) // throughout
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.addr()})
	defer rdb.Close()

	const job = "marathon"
	sub := f.submit(job, disks)
	faults := []struct {
		name string
		do   func()
	}{
		{"voter SIGKILL mid-sample", func() {
			for _, v := range f.voters {
				if !v.exited() {
					v.signal(syscall.SIGKILL)
					break
				}
			}
			f.startVoter()
		}},
		{"coordinator SIGKILL at a random step", func() {
			f.owner(job).signal(syscall.SIGKILL)
			f.startCoordinator()
		}},
		{"SCRIPT FLUSH mid-run", func() { _ = rdb.ScriptFlush(context.Background()).Err() }},
		{"zombie coordinator (SIGSTOP, takeover, SIGCONT)", func() {
			z := f.owner(job)
			z.signal(syscall.SIGSTOP)
			time.Sleep(3 * time.Second) // past the 2s lease
			z.signal(syscall.SIGCONT)
		}},
		{"Redis reply lost after the command ran", func() {
			f.proxy.setDrop(0.03)
			time.Sleep(2 * time.Second)
			f.proxy.setDrop(0)
		}},
		{"Redis restarted empty mid-step", func() { f.redis.restartEmpty(t) }},
		{"NATS server restart", func() { f.nats.restart(t) }},
	}
	total := int64(1)<<disks - 1
	// A fault every few seconds; a long job gets them further apart, so
	// it spends its time running rather than failing over.
	every := 3 * time.Second
	if disks >= 12 {
		every = 8 * time.Second
	}
	for i := 0; ; i++ {
		deadline := time.Now().Add(every)
		for time.Now().Before(deadline) && !sub.exited() {
			time.Sleep(100 * time.Millisecond)
		}
		st, ok := f.svc.status(t, job)
		if sub.exited() || (ok && st.Steps >= total-5) {
			break
		}
		if !ok || st.State != schemas.StateRunning {
			continue // between owners: wait for the next one
		}
		fl := faults[i%len(faults)]
		t.Logf("step %d/%d: %s", st.Steps, total, fl.name)
		fl.do()
		noteFault(fl.name)
	}
	rep := f.finish(sub, job, disks)
	chaosTally.Lock()
	chaosTally.duplicates += injected.Load()
	chaosTally.Unlock()
	t.Logf("marathon: %d disks, %d steps in %.1fs (%.0f steps/s), %d duplicates injected, report: duplicates %d, late %d, resampled %d",
		disks, rep.Steps, rep.WallSeconds, rep.StepsPerSecond, injected.Load(), rep.DuplicateResults, rep.LateSamples, rep.Resampled)
}

// TestChaosSummary prints what the suite did. It runs last.
func TestChaosSummary(t *testing.T) {
	chaosTally.Lock()
	defer chaosTally.Unlock()
	total := 0
	for name, n := range chaosTally.faults {
		fmt.Printf("chaos: fault %-48s x%d\n", name, n)
		total += n
	}
	fmt.Printf("chaos: faults injected %d; duplicates injected %d, duplicate results ignored by the tally %d; jobs completed %d; decisions journaled %d; decisions lost %d\n",
		total, chaosTally.duplicates, chaosTally.ignored, chaosTally.jobs, chaosTally.decisions, chaosTally.lost)
	if chaosTally.lost != 0 {
		t.Errorf("%d decisions lost", chaosTally.lost)
	}
}
