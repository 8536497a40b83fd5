package voter_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/voter"
)

// TestSkipDecidedSteps: once a step-decided event for (job, step 5, epoch
// E) has reached a voter that has seen the job's requests up to step 4 in
// E, requests of that job for steps up to 5 in epoch E are answered
// "skipped" without calling the model (a request published again too);
// later steps and any other epoch are sampled.
func TestSkipDecidedSteps(t *testing.T) {
	t.Parallel()
	const tenant, job, epoch = "acme", "skipjob", int64(1_700_000_000_000)
	env := fleettest.New(t)
	cases := []struct {
		step, epoch int64
		attempt     int
		skipped     bool
	}{
		{4, epoch, 0, true},
		{5, epoch, 0, true},
		{2, epoch, 1, true}, // a copy published again after a timeout
		{6, epoch, 0, false},
		{7, epoch - 1, 0, false}, // another epoch, smaller: maybe a newer run
		{3, epoch + 1, 0, false}, // a newer epoch (the step was reopened)
	}
	// Each request's seed names its step, so the model's calls say which
	// requests reached it.
	seeds := map[int64]fleettest.Pos{}
	for _, c := range cases {
		seeds[600+c.step] = fleettest.Pos{Step: c.step}
	}
	model := fleettest.NewFakeModel(seeds, nil)
	v := env.StartVoter(model, voter.Config{Concurrency: 4, Model: "fake"})

	in, err := hanoi.New(3)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	publish := func(step, epoch int64, index, attempt int, seed int64) {
		req := schemas.SampleRequest{
			Header: schemas.NewHeader(schemas.KindSampleRequest), Tenant: tenant, JobID: job,
			SampleID: schemas.SampleID(tenant, job, step, epoch, index, attempt), Step: step, Epoch: epoch, Index: index, Attempt: attempt,
			Task: hanoi.Name, Params: in.Params(), State: in.Initial(), Temperature: 0.1, Seed: seed,
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
	// The voter has seen step 4 of epoch E requested (a seed unknown to
	// the model's table: its call is not one of the cases').
	publish(4, epoch, 1, 0, 1)
	if warm := fetchResults(t, env, tenant, job, 1); warm[4].Outcome != schemas.OutcomeVote {
		t.Fatalf("first request answered %+v, want a vote", warm[4])
	}

	ev, err := json.Marshal(&schemas.StepDecided{
		Header: schemas.NewHeader(schemas.KindStepDecided), Tenant: tenant, JobID: job, Step: 5, Epoch: epoch,
		VoteKey: "x", Votes: 2, Lead: 2, Samples: 2, Tally: []schemas.TallyEntry{{VoteKey: "x", Votes: 2}},
		DecidedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Core NATS: an event sent before the voter subscribed is lost, so send
	// it until the voter has it.
	fleettest.Eventually(t, 10*time.Second, func() bool {
		_ = env.NC.Publish(bus.DefaultNamespace.DecidedSubject(tenant, job), ev)
		return voter.IsDecided(v.Voter, tenant, job, 5, epoch)
	}, "the voter never took the step-decided event")

	for _, c := range cases {
		publish(c.step, c.epoch, 0, c.attempt, 600+c.step)
	}

	results := fetchResults(t, env, tenant, job, len(cases))
	for _, c := range cases {
		res, ok := results[c.step]
		if !ok {
			t.Errorf("step %d epoch %d: no result", c.step, c.epoch)
			continue
		}
		want := schemas.OutcomeVote
		if c.skipped {
			want = schemas.OutcomeSkipped
		}
		if res.Outcome != want || res.Epoch != c.epoch {
			t.Errorf("step %d epoch %d: outcome %q (epoch %d), want %q", c.step, c.epoch, res.Outcome, res.Epoch, want)
		}
		if res.VoterID != "voter-test" || res.Model == "" {
			t.Errorf("step %d: result from voter %q model %q", c.step, res.VoterID, res.Model)
		}
	}
	var called []int64
	for _, r := range model.Records() {
		if r.Known {
			called = append(called, r.Step)
		}
	}
	slices.Sort(called)
	if !slices.Equal(called, []int64{3, 6, 7}) {
		t.Errorf("the model was called for steps %v, want [3 6 7] only", called)
	}
	if st := v.Stats(); st.Skipped != 3 || st.ModelCalls != 4 || st.Votes != 4 || st.Requests != int64(len(cases))+1 {
		t.Errorf("voter stats %+v, want 3 skipped, 4 model calls, 4 votes", st)
	}
}

// testToken is the token of the requests the tests publish: a voter
// echoes it, whatever it is (only coordinators can tell).
const testToken = "q3Yh0vJ2_kQ9mC1xZpL8aw"

// fetchResults reads n results of a job from the results stream, by step.
// Each must echo its request's token (testToken) and be published under
// the message id that holds it.
func fetchResults(t *testing.T, env *fleettest.Env, tenant, job string, n int) map[int64]schemas.SampleResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := env.JS.CreateOrUpdateConsumer(ctx, bus.DefaultNamespace.ResultsStream(), jetstream.ConsumerConfig{
		Durable: "test-reader", FilterSubject: bus.DefaultNamespace.ResultJobWildcard(tenant, job), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]schemas.SampleResult{}
	for len(out) < n && ctx.Err() == nil {
		batch, err := cons.Fetch(n-len(out), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			var res schemas.SampleResult
			if err := schemas.Decode(m.Data(), &res); err != nil {
				t.Errorf("undecodable result: %v", err)
			}
			if id := m.Headers().Get(jetstream.MsgIDHeader); res.Token != testToken || id != schemas.ResultMsgID(res.SampleID, testToken, 1) {
				t.Errorf("result of step %d: token %q, message id %q; want %q under %q",
					res.Step, res.Token, id, testToken, schemas.ResultMsgID(res.SampleID, testToken, 1))
			}
			if _, dup := out[res.Step]; dup {
				t.Errorf("two results for step %d", res.Step)
			}
			out[res.Step] = res
			_ = m.Ack()
		}
	}
	if len(out) < n {
		t.Fatalf("%d results of %d within the deadline: %v", len(out), n, out)
	}
	return out
}

// TestGracefulDrain: a voter stopped in the middle of a job stops pulling,
// and then either lets the calls in hand finish (within DrainTimeout) or,
// past it, cancels them and hands their samples back. In both cases a
// second voter finishes the job correctly.
func TestGracefulDrain(t *testing.T) {
	t.Parallel()
	const disks, k, jobSeed, stopAt = 3, 2, 41, 2
	cases := []struct {
		name   string
		drain  time.Duration
		script fleettest.Script
		// handedBack: the drain timeout cut calls off.
		handedBack bool
	}{
		{
			name:  "calls in hand finish",
			drain: 20 * time.Second,
			script: func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
				if err := fleettest.Wait(ctx, 500*time.Millisecond); err != nil { // a slow model
					return llm.Response{}, err
				}
				return fleettest.Right(c), nil
			},
		},
		{
			name:  "drain timeout hands calls back",
			drain: 200 * time.Millisecond,
			script: func(ctx context.Context, c fleettest.Call) (llm.Response, error) {
				if c.Step >= stopAt {
					<-ctx.Done() // a call that outlives any drain
					return llm.Response{}, ctx.Err()
				}
				return fleettest.Right(c), nil
			},
			handedBack: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := fleettest.New(t)
			seeds := fleettest.SeedTable(jobSeed, 1<<disks-1, 64)
			slow := fleettest.NewFakeModel(seeds, tc.script)
			started := make(chan fleettest.Call, 256)
			slow.Notify(started)
			env.StartCoordinator(coordinator.Config{})
			v1 := env.StartVoter(slow, voter.Config{ID: "voter-1", Concurrency: 2, DrainTimeout: tc.drain})
			spec := fleettest.HanoiSpec(disks, k, jobSeed)
			env.Submit(&spec)

			// Stop voter 1 while it is calling the model for step stopAt.
			deadline := time.After(20 * time.Second)
		wait:
			for {
				select {
				case c := <-started:
					if c.Step >= stopAt {
						break wait
					}
				case <-deadline:
					t.Fatal("voter 1 never reached the step to stop at")
				}
			}
			stoppedAt := time.Now()
			v1.Cancel()
			select {
			case <-v1.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("voter 1's Run did not return after its ctx ended")
			}
			took := time.Since(stoppedAt)
			if err := v1.Err(); err != nil {
				t.Fatalf("voter 1's Run: %v", err)
			}
			if n := slow.InFlight(); n != 0 {
				t.Errorf("voter 1's Run returned with %d model calls still in flight", n)
			}
			st := v1.Stats()
			var cut int
			for _, r := range slow.Records() {
				if r.CtxErr != nil {
					cut++
				}
			}
			if tc.handedBack {
				if st.HandedBack < 1 || cut < 1 {
					t.Errorf("voter 1 stats %+v, %d calls cut off: want calls cancelled at the drain timeout and handed back", st, cut)
				}
				if took > tc.drain+5*time.Second {
					t.Errorf("Run took %s to return with a %s drain timeout", took, tc.drain)
				}
			} else {
				// The call that reached stopAt was in hand when Run was told
				// to stop, and Run waited for it.
				var spanned bool
				for _, r := range slow.Records() {
					spanned = spanned || (r.Start.Before(stoppedAt) && r.End.After(stoppedAt) && r.CtxErr == nil)
				}
				if !spanned {
					t.Error("no call was in hand at the stop: the drain was not exercised")
				}
				if cut != 0 || st.HandedBack != 0 || st.ModelErrors != 0 {
					t.Errorf("voter 1 stats %+v, %d calls cut off: want every call in hand to finish", st, cut)
				}
				if st.ModelCalls != int64(slow.Calls()) || st.Votes != st.ModelCalls {
					t.Errorf("voter 1 stats %+v vs %d finished calls: a call in hand was not answered", st, slow.Calls())
				}
			}

			// Voter 2 finishes the job.
			env.StartVoter(fleettest.NewFakeModel(seeds, nil), voter.Config{ID: "voter-2", Concurrency: 4})
			rep := env.Wait(spec)
			if rep.State != schemas.StateSolved || rep.TraceSHA256 != fleettest.GoldenTrace(disks) || rep.Errors != 0 {
				t.Errorf("after the hand-over: state %s, errors %d, trace %s", rep.State, rep.Errors, rep.TraceSHA256)
			}
			if rep.Steps != 1<<disks-1 {
				t.Errorf("steps %d, want %d", rep.Steps, 1<<disks-1)
			}
			if rep.Samples != rep.Votes+rep.RedFlagged {
				t.Errorf("samples %d != votes %d + red flags %d", rep.Samples, rep.Votes, rep.RedFlagged)
			}
		})
	}
}
