package coordinator_test

import (
	"context"
	"testing"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/voter"
)

// TestForgedResultsDropped: at two steps, a hostile voter
// (fleettest.Forger, in an Ambush) pulls one request of the step's first
// wave, hands it back, and publishes results voting a wrong answer for
// every index of the wave and one beyond it: without a token under the
// message ids the honest answers had before sample capabilities, with
// guessed tokens, and with its own request's token. The honest voter
// answers only once the forgeries are in the stream, so they come first.
// Every forgery is dropped as forged, none pre-empts an honest answer:
// the job solves with the golden trace and exactly k honest votes a step,
// and the report counts each forgery.
func TestForgedResultsDropped(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed = 3, 2, 31
	const steps = 1<<disks - 1
	env := fleettest.New(t)
	ambush := fleettest.NewAmbush(0, 4)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, steps, 64), ambush.Script(func(_ context.Context, c fleettest.Call) (llm.Response, error) {
		return fleettest.Right(c), nil
	}))
	// A message a sample: the forger pulls one sample of a wave and
	// forges its others, whose tokens it was never handed. (A wave sent
	// as one request hands its holder every token of it: its answers
	// are a voter's answers, a vote each.)
	env.StartCoordinator(coordinator.Config{SamplesPerCall: 1})
	// One request at a time: the rest of a wave waits in the stream,
	// where the forger can pull one.
	env.StartVoter(model, voter.Config{Concurrency: 1})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	env.Submit(&spec)

	ctx, cancel := context.WithTimeout(context.Background(), gateTimeout)
	defer cancel()
	forged, err := ambush.Strike(ctx, fleettest.Forger{JS: env.JS, NS: bus.DefaultNamespace}, disks, k)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * (3*(k+1) - 1); forged != want {
		t.Fatalf("the stream stored %d forgeries, want %d", forged, want)
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
