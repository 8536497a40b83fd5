package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/builtin"
	"github.com/makerfleet/makerfleet/task/spec"
)

// lookupParams are params of testdata/lookup.yaml: n items of ~60 bytes.
func lookupParams(n, steps int) json.RawMessage {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf("item %06d: a line of text about as long as a short record", i)
	}
	b, _ := json.Marshal(map[string]any{"items": items, "steps": steps})
	return b
}

// BenchmarkInputSize runs jobs of the same number of steps over params of
// 16 to 10,000 list items on one in-process fleet, and reports each
// size's steps/s and its ratio to the 16-item job's measured in the same
// run (the target: within 10 %, i.e. a ratio of 0.9 or more). The jobs
// take turns, sizes interleaved, so a noisy machine slows them alike.
//
//	go test -run '^$' -bench InputSize -benchtime 3x ./cmd/maker/cli/
func BenchmarkInputSize(b *testing.B) {
	const steps = 1000
	src, err := os.ReadFile("testdata/lookup.yaml")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f, err := startFleet(ctx, fleetOptions{sim: simllm.Config{Accuracy: 0.99, Seed: 1}, concurrency: 16,
		log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, _, err := f.Registry.Register(ctx, src, "bench"); err != nil {
		b.Fatal(err)
	}
	sizes := []int{16, 100, 1000, 10000}
	params := map[int]json.RawMessage{}
	for _, n := range sizes {
		params[n] = lookupParams(n, steps)
	}
	wall := map[int]time.Duration{}
	run := func(n int) {
		job := schemas.JobSpec{Task: "lookup", TaskVersion: "1.0.0", Params: params[n], K: 3, Seed: 7}
		start := time.Now()
		if _, err := jobs.Submit(ctx, f.JS, f.Bus, &job, builtin.Registry(), jobs.Compile(spec.CompileSpec)); err != nil {
			b.Fatal(err)
		}
		rep, err := jobs.Wait(ctx, f.Topo, job.Tenant, job.JobID, nil)
		if err != nil {
			b.Fatal(err)
		}
		wall[n] += time.Since(start)
		if !rep.Solved || rep.Steps != steps {
			b.Fatalf("%d items: %s after %d steps (%s)", n, rep.State, rep.Steps, rep.Reason)
		}
	}
	run(16) // warm: the first job compiles the spec
	clear(wall)
	rounds := 0
	for b.Loop() {
		for _, n := range sizes {
			run(n)
		}
		rounds++
	}
	base := float64(steps*rounds) / wall[16].Seconds()
	for _, n := range sizes {
		rate := float64(steps*rounds) / wall[n].Seconds()
		b.ReportMetric(rate, fmt.Sprintf("steps/s@%d", n))
		if n != 16 {
			b.ReportMetric(rate/base, fmt.Sprintf("ratio@%d", n))
		}
	}
	b.Logf("params bytes: %d (16 items) to %d (10,000 items)", len(params[16]), len(params[10000]))
}
