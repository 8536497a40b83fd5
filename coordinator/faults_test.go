package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/voter"
)

// gateTimeout bounds every wait inside a scripted model, so a broken
// fleet fails the test instead of hanging it.
const gateTimeout = 20 * time.Second

// waitFor waits for ch to close, for ctx, or for gateTimeout.
func waitFor(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(gateTimeout):
		return errors.New("gate never opened")
	}
}

// TestLostSampleResampled: a model call that never returns (step 1, index
// 0, first attempt) is re-published after the job's sample timeout under a
// new sample id, same index and seed; the step decides on the re-sample;
// the coordinator then announces the decision because a request is still
// out, and the voter cancels the hung call, which comes back as cancelled.
func TestLostSampleResampled(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed = 3, 2, 17
	const lostStep, lastStep = 1, 6
	hungCancelled := make(chan error, 1)
	cancelledSeen := make(chan struct{})
	env, model := scriptedFleet(t, jobSeed, 1<<disks-1, func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		switch {
		case c.Step == lostStep && c.Index == 0 && c.Seq == 0:
			<-ctx.Done() // lost: only a cancellation ends it
			hungCancelled <- ctx.Err()
			return llm.Response{}, ctx.Err()
		case c.Step == lastStep:
			// Hold the last step until the cancelled result is in the
			// results stream, so the job is still running to count it.
			if err := waitFor(ctx, cancelledSeen); err != nil {
				return llm.Response{}, err
			}
		}
		return fleettest.Right(c), nil
	})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.SampleTimeoutMS = 300
	requests := fleettest.Capture[schemas.SampleRequest](env, bus.DefaultNamespace.SampleSubject(spec.Tenant, spec.JobID))
	var seen sync.Once
	sub, err := env.NC.Subscribe(bus.DefaultNamespace.ResultJobWildcard(spec.Tenant, spec.JobID), func(m *nats.Msg) {
		var res schemas.SampleResult
		if schemas.Decode(m.Data, &res) == nil && res.Outcome == schemas.OutcomeCancelled {
			seen.Do(func() { close(cancelledSeen) })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := env.NC.Flush(); err != nil {
		t.Fatal(err)
	}

	rep := env.Run(&spec)
	checkSolved(t, rep, disks)
	if rep.Resampled < 1 {
		t.Errorf("resampled %d, want >= 1", rep.Resampled)
	}
	if rep.CancelledSamples+rep.LateSamples < 1 {
		t.Errorf("cancelled %d, late %d: the hung sample was not accounted", rep.CancelledSamples, rep.LateSamples)
	}
	if rep.WastedSamples < 1 {
		t.Errorf("wasted %d, want the hung sample", rep.WastedSamples)
	}
	select {
	case err := <-hungCancelled:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("hung call ended with %v, want context.Canceled", err)
		}
	default:
		t.Error("the hung model call was never cancelled")
	}
	// The re-sample asks the same question: same index, seed, temperature
	// and state, a new attempt and sample id.
	var attempts []schemas.SampleRequest
	for _, r := range requests.All() {
		if r.Step == lostStep && r.Index == 0 {
			attempts = append(attempts, r)
		}
	}
	if len(attempts) < 2 {
		t.Fatalf("%d requests for step %d index 0, want the original and a re-sample", len(attempts), lostStep)
	}
	a, b := attempts[0], attempts[1]
	if b.Attempt != a.Attempt+1 || b.SampleID == a.SampleID || b.Seed != a.Seed || b.Temperature != 0 || a.Temperature != 0 ||
		string(b.State) != string(a.State) || b.Epoch != a.Epoch {
		t.Errorf("re-sample %+v does not repeat %+v under a new attempt", b, a)
	}
	if n := model.Calls(); int64(n) < rep.Samples+1 {
		t.Errorf("%d model calls, want the %d counted plus the hung one", n, rep.Samples)
	}
}

// TestMalformedMessagesNeverCrash: garbage and wrong-kind messages on the
// job, sample, decided and result subjects of a running job are dropped
// and counted; the job still solves. The report counts the result ones
// (malformed, or forged: a result for an index never published carries no
// token of its sample), the voter the request and event ones.
func TestMalformedMessagesNeverCrash(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, heldStep = 3, 2, 23, 2
	held := make(chan struct{})
	reached := make(chan struct{}, 16)
	env := fleettest.New(t)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if c.Step == heldStep {
			reached <- struct{}{}
			if err := waitFor(ctx, held); err != nil {
				return llm.Response{}, err
			}
		}
		return fleettest.Right(c), nil
	})
	env.StartCoordinator(coordinator.Config{})
	v := env.StartVoter(model, voter.Config{Concurrency: 8})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	requests := fleettest.Capture[schemas.SampleRequest](env, bus.DefaultNamespace.SampleSubject(spec.Tenant, spec.JobID))

	// A garbage job first: the coordinator drops it and takes the real one.
	if err := env.NC.Publish(bus.DefaultNamespace.JobSubject(spec.Tenant), []byte("\x00not a job")); err != nil {
		t.Fatal(err)
	}
	env.Submit(&spec)
	select {
	case <-reached:
	case <-time.After(gateTimeout):
		t.Fatal("the job never reached the held step")
	}
	var epoch int64
	fleettest.Eventually(t, 10*time.Second, func() bool {
		for _, r := range requests.All() {
			if r.Step == heldStep {
				epoch = r.Epoch
			}
		}
		return epoch != 0
	}, "no request of step %d seen", heldStep)
	mustJSON := func(m schemas.Message) []byte {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ghostReq := func(task string, state json.RawMessage) []byte {
		return mustJSON(&schemas.SampleRequest{
			Header: schemas.NewHeader(schemas.KindSampleRequest), Tenant: spec.Tenant, JobID: "ghost",
			SampleID: schemas.SampleID(spec.Tenant, "ghost", 0, 1, 0, 0), Epoch: 1,
			Task: task, Params: json.RawMessage(`{"disks":3}`), State: state, MaxOutputTokens: 750,
			Token: strings.Repeat("A", schemas.SampleTokenLen),
		})
	}
	result := func(job string, step int64, epoch int64, index int) []byte {
		return mustJSON(&schemas.SampleResult{
			Header: schemas.NewHeader(schemas.KindSampleResult), Tenant: spec.Tenant, JobID: job,
			SampleID: schemas.SampleID(spec.Tenant, job, step, epoch, index, 0), Step: step, Epoch: epoch, Index: index,
			Outcome: schemas.OutcomeVote, VoteKey: `{"move":[1,0,2],"next_state":[[3,2],[],[1]]}`, VoterID: "intruder",
		})
	}
	in, _ := hanoi.New(3)
	badRequests := [][]byte{
		[]byte("\x00\xff garbage"),
		[]byte(`{}`),
		mustJSON(&spec), // a job spec: wrong kind
		[]byte(`{"v":1,"kind":"sample_request"}`),
		ghostReq("nosuchtask", in.Initial()), // a task this voter cannot run
		ghostReq("hanoi", json.RawMessage(`{"pegs":[[3,1],[1],[]]}`)), // a state the task refuses
	}
	badEvents := [][]byte{
		[]byte("decided!"),
		mustJSON(&spec),
	}
	badResults := [][]byte{
		[]byte("not json"),
		[]byte(`{}`),
		mustJSON(&schemas.StepDecided{Header: schemas.NewHeader(schemas.KindStepDecided)}), // wrong kind
		result("ghost", heldStep, epoch, 0),                                                // another job's result on this job's subject
	}
	// An index never published: no token can be its sample's, so it is
	// dropped as forged, before the index is looked at.
	forged := [][]byte{result(spec.JobID, heldStep, epoch, 999)}
	publish := func(subject string, msgs [][]byte) {
		for _, m := range msgs {
			if err := env.NC.Publish(subject, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(bus.DefaultNamespace.SampleSubject(spec.Tenant, spec.JobID), badRequests)
	publish(bus.DefaultNamespace.DecidedSubject(spec.Tenant, spec.JobID), badEvents)
	publish(bus.DefaultNamespace.ResultSubject(spec.Tenant, spec.JobID, schemas.EpochGen(epoch)), badResults)
	publish(bus.DefaultNamespace.ResultSubject(spec.Tenant, spec.JobID, schemas.EpochGen(epoch)), forged)
	if err := env.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	want := int64(len(badRequests) + len(badEvents))
	fleettest.Eventually(t, 10*time.Second, func() bool { return v.Stats().Malformed >= want },
		"voter counted %d malformed messages, want %d", v.Stats().Malformed, want)
	close(held)

	rep := env.Wait(spec)
	checkSolved(t, rep, disks)
	if rep.MalformedMessages != int64(len(badResults)) || rep.ForgedResults != int64(len(forged)) {
		t.Errorf("malformed_messages %d, forged_results %d, want %d and %d (late %d)",
			rep.MalformedMessages, rep.ForgedResults, len(badResults), len(forged), rep.LateSamples)
	}
	if got := v.Stats().Malformed; got != want {
		t.Errorf("voter malformed %d, want %d", got, want)
	}
}

// TestUnreadableVotesDropped: a rogue voter answers the first request of
// index 0 at three steps, before the honest voter (whose model never
// answers those calls), with schema-valid votes whose keys the task cannot
// read: garbage, another spelling of the right answer (counting it would
// split the right answer's votes), a move of a disk that does not exist.
// Each is dropped with a reason, counted in malformed_messages and never
// tallied; the index is re-sampled after the sample timeout, so the job
// solves with exactly k votes a step.
func TestUnreadableVotesDropped(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed = 3, 2, 29
	const steps = 1<<disks - 1
	keys, _ := fleettest.Golden(disks)
	spaced := strings.ReplaceAll(keys[2], `":`, `": `)
	noSuchDisk, err := hanoi.DecodeAnswer(keys[4])
	if err != nil {
		t.Fatal(err)
	}
	noSuchDisk.Move[0] = disks + 1
	rogue := map[int64]string{0: "garbage-key", 2: spaced, 4: noSuchDisk.Key()}

	env := fleettest.New(t)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, steps, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if _, ok := rogue[c.Step]; ok && c.Index == 0 && c.Seq == 0 {
			<-ctx.Done() // only the rogue answers this one
			return llm.Response{}, ctx.Err()
		}
		return fleettest.Right(c), nil
	})
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(model, voter.Config{Concurrency: 8})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.SampleTimeoutMS = 300
	terms := fleettest.Terminations(env, bus.DefaultNamespace.ResultsStream(), "*")
	requests := fleettest.Capture[schemas.SampleRequest](env, bus.DefaultNamespace.SampleSubject(spec.Tenant, spec.JobID))
	injected := env.AnswerFirst(spec, func(req *schemas.SampleRequest) (schemas.SampleResult, bool) {
		key, ok := rogue[req.Step]
		return schemas.SampleResult{Outcome: schemas.OutcomeVote, VoteKey: key}, ok && req.Index == 0 && req.Attempt == 0
	})

	rep := env.Run(&spec)
	checkSolved(t, rep, disks)
	if n := injected.Load(); n != int64(len(rogue)) {
		t.Fatalf("the rogue voter answered %d requests, want %d", n, len(rogue))
	}
	if rep.MalformedMessages != int64(len(rogue)) {
		t.Errorf("malformed_messages %d, want the %d rogue votes", rep.MalformedMessages, len(rogue))
	}
	if rep.Votes != k*steps || rep.Samples != k*steps {
		t.Errorf("votes %d, samples %d; want %d each: a rogue vote was tallied", rep.Votes, rep.Samples, k*steps)
	}
	var resampled []int64
	for _, r := range requests.All() {
		if r.Attempt > 0 {
			resampled = append(resampled, r.Step)
		}
	}
	for step := range rogue {
		if !slices.Contains(resampled, step) {
			t.Errorf("step %d was not re-sampled (re-sampled steps %v): the rogue's vote must not answer its index", step, resampled)
		}
	}
	got := terms()
	if len(got) != len(rogue) {
		t.Fatalf("%d results terminated, want the %d rogue votes: %+v", len(got), len(rogue), got)
	}
	for _, a := range got {
		if a.Reason != "vote key the task cannot read" {
			t.Errorf("result terminated with reason %q, want %q", a.Reason, "vote key the task cannot read")
		}
	}
}

// TestPermanentModelErrorRedFlagged: the model refuses one sample for good
// (an error wrapping llm.ErrPermanent). The voter answers it as a
// red-flagged sample ("refused"), so nobody waits for it: the step draws
// another sample in its place at once (no timeout, no re-sample) and the
// job solves, with the refusal in the report's red flags.
func TestPermanentModelErrorRedFlagged(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, refusedStep = 3, 2, 37, 1
	env := fleettest.New(t)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), func(_ context.Context, c fleettest.Call) (llm.Response, error) {
		if c.Step == refusedStep && c.Index == 0 && c.Seq == 0 {
			return llm.Response{}, fmt.Errorf("%w: status 400: prompt rejected", llm.ErrPermanent)
		}
		return fleettest.Right(c), nil
	})
	env.StartCoordinator(coordinator.Config{})
	v := env.StartVoter(model, voter.Config{Concurrency: 8})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)

	rep := env.Run(&spec)
	checkSolved(t, rep, disks)
	if st := v.Stats(); st.ModelErrors != 1 || st.HandedBack != 0 {
		t.Errorf("voter stats %+v, want exactly 1 model error", st)
	}
	if rep.RedFlags[schemas.RedFlagRefused] != 1 || rep.RedFlagged != 1 || rep.Resampled != 0 {
		t.Errorf("red flags %v (%d), resampled %d; want the one refusal red-flagged and nothing re-sampled", rep.RedFlags, rep.RedFlagged, rep.Resampled)
	}
}

// TestResampleBackoff: an index whose model call never returns is
// re-published after the sample timeout T, then after 2T, 4T, 8T and 16T,
// and from then on every 16T: an answer that is only slow is not paid for
// again and again. The job never gives up on the index and solves once
// the model answers.
func TestResampleBackoff(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, lostStep, unanswered = 2, 1, 31, 1, 6
	const timeout = 40 * time.Millisecond
	env := fleettest.New(t)
	model := fleettest.NewFakeModel(fleettest.SeedTable(jobSeed, 1<<disks-1, 64), func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if c.Step == lostStep && c.Index == 0 && c.Seq < unanswered {
			<-ctx.Done() // lost until the step is decided
			return llm.Response{}, ctx.Err()
		}
		return fleettest.Right(c), nil
	})
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(model, voter.Config{Concurrency: unanswered + 2})
	spec := fleettest.HanoiSpec(disks, k, jobSeed)
	spec.SampleTimeoutMS = timeout.Milliseconds()
	requests := fleettest.Capture[schemas.SampleRequest](env, bus.DefaultNamespace.SampleSubject(spec.Tenant, spec.JobID))

	rep := env.Run(&spec)
	checkSolved(t, rep, disks)
	var attempts []schemas.SampleRequest
	for _, r := range requests.All() {
		if r.Step == lostStep && r.Index == 0 {
			attempts = append(attempts, r)
		}
	}
	if len(attempts) != unanswered+1 || rep.Resampled < unanswered {
		t.Fatalf("%d requests for the lost index (resampled %d), want %d", len(attempts), rep.Resampled, unanswered+1)
	}
	for i := 1; i < len(attempts); i++ {
		if attempts[i].Attempt != i {
			t.Fatalf("request %d is attempt %d", i, attempts[i].Attempt)
		}
		gap := attempts[i].IssuedAt.Sub(attempts[i-1].IssuedAt)
		want := timeout << min(i-1, 4)
		// Late by at most a sweep tick (T/4) plus scheduling: well short
		// of the next doubling, so the 16T cap shows too.
		if gap < want || gap > want+want/4+150*time.Millisecond {
			t.Errorf("attempt %d published %s after attempt %d, want %s (timeout × %d)", i, gap, i-1, want, want/timeout)
		}
	}
}
