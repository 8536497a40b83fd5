package voter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/voter"
)

// publishRequests queues one first-step hanoi request per step in steps for
// job, each with seed 700+step, so a fake model can tell them apart.
func publishRequests(t *testing.T, env *fleettest.Env, tenant, job string, steps ...int64) {
	t.Helper()
	in, err := hanoi.New(3)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const epoch = 1_700_000_000_000
	for _, step := range steps {
		req := schemas.SampleRequest{
			Header: schemas.NewHeader(schemas.KindSampleRequest), Tenant: tenant, JobID: job,
			SampleID: schemas.SampleID(tenant, job, step, epoch, 0, 0), Step: step, Epoch: epoch,
			Task: hanoi.Name, Params: in.Params(), State: in.Initial(), Temperature: 0.1, Seed: 700 + step,
			MaxOutputTokens: 750, Token: testToken, IssuedAt: time.Now().UTC(),
		}
		data, err := json.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		msg := &nats.Msg{Subject: bus.DefaultNamespace.SampleSubject(tenant, job), Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, req.SampleID)
		if _, err := env.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
}

// votersInfo reads the shared voters consumer.
func votersInfo(t *testing.T, env *fleettest.Env) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := env.JS.Consumer(ctx, bus.DefaultNamespace.SamplesStream(), bus.ConsumerVoters)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestNeverHoldsMoreThanConcurrency: a voter reserves a slot before it
// fetches, so with 12 requests queued and a slow model it never holds
// (has delivered and not yet acked) more requests than Concurrency: the
// rest stay in the stream for other voters. Every request is answered.
// The first calls block until released, so the voter is watched for a
// while in the state where a prefetching voter would have filled its
// buffer; then the queue is worked off under watch.
func TestNeverHoldsMoreThanConcurrency(t *testing.T) {
	t.Parallel()
	const tenant, job, concurrency, queued = "acme", "slots", 2, 12
	env := fleettest.New(t)
	steps := make([]int64, queued)
	for i := range steps {
		steps[i] = int64(i)
	}
	publishRequests(t, env, tenant, job, steps...)
	results := fleettest.Capture[schemas.SampleResult](env, bus.DefaultNamespace.ResultJobWildcard(tenant, job))
	release := make(chan struct{})
	var calls atomic.Int64
	model := fleettest.NewFakeModel(nil, func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
		if calls.Add(1) <= concurrency {
			select {
			case <-release:
			case <-ctx.Done():
				return llm.Response{}, ctx.Err()
			}
		}
		// Uneven latencies: one worker frees its slot while the other
		// is still busy, the moment a prefetching voter takes more.
		if err := fleettest.Wait(ctx, time.Duration(5+40*(c.Seed%2))*time.Millisecond); err != nil {
			return llm.Response{}, err
		}
		return fleettest.Right(c), nil
	})
	v := env.StartVoter(model, voter.Config{Concurrency: concurrency})

	var maxHeld, maxInFlight int64
	polls := 0
	watch := func() {
		info := votersInfo(t, env)
		maxHeld = max(maxHeld, int64(info.NumAckPending))
		maxInFlight = max(maxInFlight, model.InFlight())
		polls++
	}
	fleettest.Eventually(t, 20*time.Second, func() bool { watch(); return model.InFlight() == concurrency },
		"the voter never had %d calls in flight", concurrency)
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		watch()
	}
	close(release)
	fleettest.Eventually(t, 30*time.Second, func() bool { watch(); return len(results.All()) == queued },
		"%d of %d requests answered", len(results.All()), queued)
	if maxHeld > concurrency {
		t.Errorf("the voter held up to %d requests at once, want at most Concurrency = %d", maxHeld, concurrency)
	}
	if maxHeld < 1 || maxInFlight > concurrency {
		t.Errorf("held at most %d, model calls in flight up to %d (%d polls): the test did not watch the voter work", maxHeld, maxInFlight, polls)
	}
	seen := map[int64]bool{}
	for _, r := range results.All() {
		if r.Outcome != schemas.OutcomeVote || seen[r.Step] {
			t.Errorf("result %+v: want one vote per request", r)
		}
		seen[r.Step] = true
	}
	fleettest.Eventually(t, 10*time.Second, func() bool {
		info := votersInfo(t, env)
		return info.NumAckPending == 0 && info.NumPending == 0
	}, "requests left unacked: %+v", votersInfo(t, env))
	if st := v.Stats(); st.Requests != queued || st.Votes != queued || st.ModelCalls != queued || st.ModelErrors != 0 {
		t.Errorf("voter stats %+v, want %d requests, calls and votes", st, queued)
	}
	if info := votersInfo(t, env); info.NumRedelivered != 0 {
		t.Errorf("%d requests redelivered: one sat in the voter's buffer past its ack wait?", info.NumRedelivered)
	}
}

// TestPermanentModelErrorTerminated: a model error wrapping
// llm.ErrPermanent (a request the model will never take) answers the
// request as a red-flagged sample with the reason (acked, not redelivered:
// the step draws another sample in its place), counts a model error, and
// pauses the worker ModelErrorDelay before it takes the next request.
func TestPermanentModelErrorRedFlagged(t *testing.T) {
	t.Parallel()
	const tenant, job, refused, fine = "acme", "refused", 1, 2
	const pause = 300 * time.Millisecond
	env := fleettest.New(t)
	terms := fleettest.Terminations(env, bus.DefaultNamespace.SamplesStream(), bus.ConsumerVoters)
	results := fleettest.Capture[schemas.SampleResult](env, bus.DefaultNamespace.ResultJobWildcard(tenant, job))
	model := fleettest.NewFakeModel(nil, func(_ context.Context, c fleettest.Call) (llm.Response, error) {
		if c.Seed == 700+refused {
			return llm.Response{}, fmt.Errorf("%w: status 400: model %q does not exist", llm.ErrPermanent, "gpt-nope")
		}
		return fleettest.Right(c), nil
	})
	publishRequests(t, env, tenant, job, refused, fine)
	// One worker, so the pause shows as the gap before the next call.
	v := env.StartVoter(model, voter.Config{Concurrency: 1, ModelErrorDelay: pause})

	fleettest.Eventually(t, 20*time.Second, func() bool { return len(results.All()) == 2 },
		"%d results; want both requests answered", len(results.All()))
	if len(terms()) != 0 {
		t.Errorf("%d terminations, want none: a refused request is answered", len(terms()))
	}
	for _, r := range results.All() {
		switch r.Step {
		case refused:
			if r.Outcome != schemas.OutcomeRedFlag || r.RedFlag != schemas.RedFlagRefused ||
				!strings.HasPrefix(r.Detail, "model: ") || !strings.Contains(r.Detail, `model "gpt-nope" does not exist`) {
				t.Errorf("refused request answered %+v, want red flag refused with the model's error", r)
			}
		case fine:
			if r.Outcome != schemas.OutcomeVote {
				t.Errorf("fine request answered %+v, want a vote", r)
			}
		}
	}
	fleettest.Eventually(t, 10*time.Second, func() bool {
		info := votersInfo(t, env)
		return info.NumAckPending == 0 && info.NumPending == 0
	}, "requests still pending: %+v", votersInfo(t, env))
	if info := votersInfo(t, env); info.NumRedelivered != 0 {
		t.Errorf("%d requests redelivered, want the refused one dropped", info.NumRedelivered)
	}
	recs := model.Records()
	if len(recs) != 2 || recs[0].Seed != 700+refused || recs[1].Seed != 700+fine {
		t.Fatalf("model calls %+v, want the refused request once, then the fine one", recs)
	}
	if gap := recs[1].Start.Sub(recs[0].End); gap < pause {
		t.Errorf("the worker took the next request %s after the permanent error, want a pause of ModelErrorDelay = %s", gap, pause)
	}
	if st := v.Stats(); st.ModelErrors != 1 || st.Requests != 2 || st.Votes != 1 || st.RedFlags != 1 || st.HandedBack != 0 {
		t.Errorf("voter stats %+v, want 1 model error, 2 requests, 1 vote, 1 red flag", st)
	}
}

// TestStopStrandsNoRequest: a request that reaches a voter as it is told
// to stop (its pull was already out at the server) is answered at once, by
// that voter or by another one: none is left delivered-but-unseen, waiting
// out the 30s ack wait. The race is narrow, so it is run many times.
func TestStopStrandsNoRequest(t *testing.T) {
	t.Parallel()
	const tenant, job, rounds = "acme", "stopping", 30
	env := fleettest.New(t)
	results := fleettest.Capture[schemas.SampleResult](env, bus.DefaultNamespace.ResultJobWildcard(tenant, job))
	in, err := hanoi.New(3)
	if err != nil {
		t.Fatal(err)
	}
	const epoch = 1_700_000_000_000
	for i := range rounds {
		v := env.StartVoter(fleettest.NewFakeModel(nil, nil), voter.Config{ID: fmt.Sprintf("voter-%d", i), Concurrency: 1})
		fleettest.Eventually(t, 10*time.Second, func() bool { return votersInfo(t, env).NumWaiting >= 1 },
			"voter %d never pulled", i)
		step := int64(i)
		req := schemas.SampleRequest{
			Header: schemas.NewHeader(schemas.KindSampleRequest), Tenant: tenant, JobID: job,
			SampleID: schemas.SampleID(tenant, job, step, epoch, 0, 0), Step: step, Epoch: epoch,
			Task: hanoi.Name, Params: in.Params(), State: in.Initial(), Temperature: 0.1, Seed: 700 + step,
			MaxOutputTokens: 750, Token: testToken, IssuedAt: time.Now().UTC(),
		}
		data, err := json.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		// The request and the stop cross: the server hands the request to
		// the voter's pull while the voter is giving it up.
		if err := env.NC.Publish(bus.DefaultNamespace.SampleSubject(tenant, job), data); err != nil {
			t.Fatal(err)
		}
		v.Cancel()
		<-v.Done()
	}
	env.StartVoter(fleettest.NewFakeModel(nil, nil), voter.Config{ID: "voter-last", Concurrency: 4})
	fleettest.Eventually(t, 10*time.Second, func() bool { return votersInfo(t, env).NumWaiting >= 1 },
		"the last voter never pulled")
	fleettest.Eventually(t, 10*time.Second, func() bool { return len(results.All()) == rounds },
		"%d of %d requests answered (consumer %+v)", len(results.All()), rounds, votersInfo(t, env))
}

// TestLastDeliveryDeadLettered: a request whose model call keeps failing is
// handed back until its last allowed delivery; there the voter keeps it in
// the dead-letter stream, payload and reason, and terminates it, so it is
// neither lost nor left un-acked.
func TestLastDeliveryDeadLettered(t *testing.T) {
	t.Parallel()
	const tenant, job = "acme", "poison"
	env := fleettest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := env.JS.Consumer(ctx, bus.DefaultNamespace.SamplesStream(), bus.ConsumerVoters)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cons.CachedInfo().Config
	cfg.MaxDeliver = 2
	if _, err := env.JS.UpdateConsumer(ctx, bus.DefaultNamespace.SamplesStream(), cfg); err != nil {
		t.Fatal(err)
	}
	model := fleettest.NewFakeModel(nil, func(_ context.Context, c fleettest.Call) (llm.Response, error) {
		return llm.Response{}, errors.New("status 500: the model is down")
	})
	publishRequests(t, env, tenant, job, 1)
	env.StartVoter(model, voter.Config{Concurrency: 1, ModelErrorDelay: 50 * time.Millisecond})

	var dls []schemas.StoredDeadLetter
	fleettest.Eventually(t, 20*time.Second, func() bool {
		dls, err = bus.ListDeadLetters(ctx, env.JS, bus.DefaultNamespace, tenant, job, 10)
		return err == nil && len(dls) == 1
	}, "no dead letter: %v %v", dls, err)
	d := dls[0]
	var req schemas.SampleRequest
	if !strings.HasPrefix(d.Reason, "max_deliveries: ") || !strings.Contains(d.Reason, "the model is down") || d.Deliveries != 2 ||
		schemas.Decode(d.Data, &req) != nil || req.Step != 1 {
		t.Errorf("dead letter %+v: want the request and why, after 2 deliveries", d)
	}
	if n := model.Calls(); n != 2 {
		t.Errorf("%d model calls, want one per delivery (2)", n)
	}
	fleettest.Eventually(t, 10*time.Second, func() bool {
		info := votersInfo(t, env)
		return info.NumAckPending == 0 && info.NumPending == 0
	}, "requests still pending: %+v", votersInfo(t, env))
}
