package batch_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/devserver"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
	"github.com/makerfleet/makerfleet/voter"
)

// natsChildEnv, set to a store dir, makes this test binary a nats-server
// (see TestMain): the benchmark runs the server in a child process, so the
// heap it measures is the fleet's and the batch runner's alone, not the
// server's store of the batch's lines and reports.
const natsChildEnv = "MAKER_BATCH_BENCH_NATS_DIR"

// serveNATS runs a nats-server until stdin closes (the parent is gone),
// printing its URL first.
func serveNATS(dir string) {
	ns, err := devserver.RunNATS(devserver.NATSOptions{StoreDir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ns.ClientURL())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ns.Shutdown()
	ns.WaitForShutdown()
}

// childNATS starts a nats-server in a child process, stopped at cleanup.
func childNATS(b *testing.B) *testkit.NATS {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), natsChildEnv+"="+filepath.Join(b.TempDir(), "js"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	url, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("child nats-server: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return &testkit.NATS{URL: strings.TrimSpace(url)}
}

// heapMiB is the heap in use after a collection, in MiB.
func heapMiB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse) / (1 << 20)
}

// BenchmarkBatch10k runs a batch of 10,000 one-step jobs (hanoi, 1 disk,
// k=1) through a fleet in this process (the nats-server in a child
// process, redis-server its own) and reports how long creating, running
// and reading the output take, and the heap in use after 1,000 and after
// 10,000 lines at each stage: it does not grow with the batch. -short runs
// 2,000 lines. Run it once: go test -run '^$' -bench Batch10k -benchtime 1x.
func BenchmarkBatch10k(b *testing.B) {
	n := 10_000
	if testing.Short() {
		n = 2_000
	}
	first := n / 10
	for b.Loop() {
		env := fleettest.NewWith(b, fleettest.Backends{NATS: childNATS(b)})
		rn := fleettest.StartSim(b, simllm.Config{Accuracy: 1})
		env.StartVoter(fleettest.SimClient(b, rn, llm.Config{}), voter.Config{Concurrency: 64})
		env.StartCoordinator(coordinator.Config{MaxJobs: 64})
		store := batch.NewStore(env.Topo, taskreg.New(env.Topo.Tasks, env.Tasks, taskspec.CompileSpec))
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)

		base := heapMiB()
		in := &countingReader{r: &lineSource{n: n}, at: map[int]*float64{first: new(float64), n: new(float64)}}
		t0 := time.Now()
		rec, err := store.Create(ctx, "bench", in, batch.CreateOptions{Window: 64})
		if err != nil {
			b.Fatal(err)
		}
		createTime := time.Since(t0)

		var mu sync.Mutex
		var runAt1k, runAtEnd float64
		t1 := time.Now()
		end, err := store.Wait(ctx, "bench", rec.ID, func(r schemas.BatchRecord) {
			mu.Lock()
			defer mu.Unlock()
			if runAt1k == 0 && r.Counts.Completed >= int64(first) {
				runAt1k = heapMiB()
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		runTime := time.Since(t1)
		runAtEnd = heapMiB()
		if end.State != schemas.BatchCompleted || end.Counts.Completed != int64(n) {
			b.Fatalf("batch ended %s with %+v", end.State, end.Counts)
		}

		out := &outputSink{at: map[int]*float64{first: new(float64), n: new(float64)}}
		t2 := time.Now()
		if err := store.Output(ctx, "bench", rec.ID, out); err != nil {
			b.Fatal(err)
		}
		outputTime := time.Since(t2)
		if out.lines != n {
			b.Fatalf("%d output lines, want %d", out.lines, n)
		}
		cancel()

		b.ReportMetric(runTime.Seconds(), "run-s")
		b.ReportMetric(float64(n)/runTime.Seconds(), "jobs/s")
		b.ReportMetric(runAt1k, "run-heap-1k-MiB")
		b.ReportMetric(runAtEnd, "run-heap-end-MiB")
		b.Logf("%d lines: base heap %.1f MiB", n, base)
		b.Logf("create: %v; heap after line %d %.1f MiB, after line %d %.1f MiB", createTime.Round(time.Millisecond),
			first, *in.at[first], n, *in.at[n])
		b.Logf("run:    %v (%.0f jobs/s); heap after %d jobs %.1f MiB, after %d jobs %.1f MiB", runTime.Round(time.Millisecond),
			float64(n)/runTime.Seconds(), first, runAt1k, n, runAtEnd)
		b.Logf("output: %v (%d bytes); heap after line %d %.1f MiB, after line %d %.1f MiB", outputTime.Round(time.Millisecond),
			out.bytes, first, *out.at[first], n, *out.at[n])
	}
}

// lineSource writes n batch lines, one at a time, never holding more.
type lineSource struct {
	n, i int
	buf  []byte
}

func (s *lineSource) Read(p []byte) (int, error) {
	for len(s.buf) == 0 {
		if s.i == s.n {
			return 0, io.EOF
		}
		s.i++
		s.buf = fmt.Appendf(s.buf[:0], `{"custom_id":"r%d","task":"hanoi","params":{"disks":1},"k":1,"seed":%d}`+"\n", s.i, s.i)
	}
	k := copy(p, s.buf)
	s.buf = s.buf[k:]
	return k, nil
}

// countingReader measures the heap when Create has read line n, for each
// n in at (lineSource's lines are read whole before the next starts, so
// "read" is close to "stored").
type countingReader struct {
	r  *lineSource
	at map[int]*float64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if v, ok := c.at[c.r.i]; ok && *v == 0 && len(c.r.buf) == 0 {
		*v = heapMiB()
	}
	n, err := c.r.Read(p)
	if err == io.EOF {
		if v := c.at[c.r.i]; v != nil && *v == 0 {
			*v = heapMiB()
		}
	}
	return n, err
}

// outputSink counts output lines, measuring the heap after each n in at.
type outputSink struct {
	lines, bytes int
	at           map[int]*float64
}

func (o *outputSink) Write(p []byte) (int, error) {
	for _, c := range p {
		if c == '\n' {
			o.lines++
			if v, ok := o.at[o.lines]; ok {
				*v = heapMiB()
			}
		}
	}
	o.bytes += len(p)
	return len(p), nil
}
