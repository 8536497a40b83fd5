package coordinator_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/testkit/fleettest"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/voter"
)

// TestForgedResultsDropped: at two steps, a hostile voter
// (fleettest.Forger) pulls one request of the step's first wave, hands it
// back, and publishes results voting a wrong answer for every index of
// the wave and one beyond it: without a token under the message ids the
// honest answers had before sample capabilities, with guessed tokens, and
// with its own request's token. The honest voter answers only once the
// forgeries are in the stream, so they come first. Every forgery is
// dropped as forged, none pre-empts an honest answer: the job solves with
// the golden trace and exactly k honest votes a step, and the report
// counts each forgery.
func TestForgedResultsDropped(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed = 3, 2, 31
	const steps = 1<<disks - 1
	type gate struct {
		once             sync.Once
		reached, release chan struct{}
	}
	gates := map[int64]*gate{}
	for _, s := range []int64{0, 4} {
		gates[s] = &gate{reached: make(chan struct{}), release: make(chan struct{})}
	}
	env := fleettest.New(t)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, steps, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if g, ok := gates[c.Step]; ok {
			g.once.Do(func() { close(g.reached) })
			if err := waitFor(ctx, g.release); err != nil {
				return llm.Response{}, err
			}
		}
		return fleettest.Right(c), nil
	})
	env.StartCoordinator(coordinator.Config{})
	// One request at a time: the rest of a wave waits in the stream,
	// where the forger can pull one.
	env.StartVoter(model, voter.Config{Concurrency: 1})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	env.Submit(&spec)

	keys, states := fleettest.Golden(disks)
	forger := fleettest.Forger{JS: env.JS, NS: bus.DefaultNamespace}
	forged := 0
	for _, step := range []int64{0, 4} {
		g := gates[step]
		select {
		case <-g.reached:
		case <-time.After(gateTimeout):
			t.Fatalf("the job never reached step %d", step)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, err := forger.Pull(ctx)
		if err != nil || req.Step != step {
			cancel()
			t.Fatalf("the forger pulled %+v, %v; want a request of step %d", req, err, step)
		}
		right, err := hanoi.DecodeAnswer(keys[step])
		if err != nil {
			t.Fatal(err)
		}
		wrong := hanoi.Answer{Move: right.Move, NextState: states[step].Pegs}.Key()
		n, err := forger.Forge(ctx, req, k+1, wrong)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if want := 3*(k+1) - 1; n != want {
			t.Fatalf("step %d: the stream stored %d forgeries, want %d", step, n, want)
		}
		forged += n
		close(g.release)
	}

	rep := env.Wait(spec)
	checkSolved(t, rep, disks)
	if rep.ForgedResults != int64(forged) {
		t.Errorf("forged_results %d, want the %d forgeries", rep.ForgedResults, forged)
	}
	if rep.Samples != steps*k || rep.Votes != steps*k || rep.MalformedMessages != 0 || rep.DuplicateResults != 0 {
		t.Errorf("samples %d, votes %d, malformed %d, duplicates %d: want %d honest votes and nothing else counted",
			rep.Samples, rep.Votes, rep.MalformedMessages, rep.DuplicateResults, steps*k)
	}
}
