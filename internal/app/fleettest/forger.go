package fleettest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// Forger is a hostile voter, for the tests of sample capabilities: on a
// voter's connection it pulls one sample request the way a voter does,
// hands it back, and publishes results for the samples of its wave it
// was never handed.
type Forger struct {
	JS jetstream.JetStream
	NS bus.Namespace
	// VoterID names it in its results. Default "forger".
	VoterID string
}

// Pull takes one sample request from the voters' consumer, as a voter
// does, and hands it back at once (nak), so an honest voter answers it.
func (f Forger) Pull(ctx context.Context) (schemas.SampleRequest, error) {
	cons, err := f.JS.Consumer(ctx, f.NS.SamplesStream(), bus.ConsumerVoters)
	if err != nil {
		return schemas.SampleRequest{}, fmt.Errorf("forger: voters' consumer: %w", err)
	}
	for ctx.Err() == nil {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return schemas.SampleRequest{}, fmt.Errorf("forger: fetch: %w", err)
		}
		for msg := range batch.Messages() {
			var req schemas.SampleRequest
			err := schemas.Decode(msg.Data(), &req)
			if nerr := msg.Nak(); nerr != nil {
				return req, fmt.Errorf("forger: hand the request back: %w", nerr)
			}
			return req, err
		}
	}
	return schemas.SampleRequest{}, ctx.Err()
}

// Forge publishes, for each index from 0 to indexes-1 of req's step and
// epoch (attempt 0), a result voting voteKey three times: with no token
// under the message id an honest answer had before sample capabilities
// (sample id + "/r1"); with a guessed token under the message id that
// holds it (schemas.ResultMsgID); and with req's own token (another
// sample's) under that one's id (skipped for req's own index, whose token
// it holds). It returns how many results the stream stored.
func (f Forger) Forge(ctx context.Context, req schemas.SampleRequest, indexes int, voteKey string) (int, error) {
	voterID := f.VoterID
	if voterID == "" {
		voterID = "forger"
	}
	subject := f.NS.ResultSubject(req.Tenant, req.JobID, schemas.EpochGen(req.Epoch))
	stored := 0
	for idx := range indexes {
		id := schemas.BranchSampleID(req.Tenant, req.JobID, req.Step, req.Epoch, idx, 0, req.Branch)
		forgeries := []struct{ token, msgID string }{
			{"", id + "/r1"},
			{guessToken(), ""},
		}
		if idx != req.Index {
			forgeries = append(forgeries, struct{ token, msgID string }{req.Token, ""})
		}
		for _, fg := range forgeries {
			res := schemas.SampleResult{
				Header: schemas.NewHeader(schemas.KindSampleResult), Tenant: req.Tenant, JobID: req.JobID, SampleID: id,
				Step: req.Step, Epoch: req.Epoch, Index: idx, Branch: req.Branch,
				Outcome: schemas.OutcomeVote, VoteKey: voteKey, PromptTokens: 100, CompletionTokens: 20,
				VoterID: voterID, Token: fg.token,
			}
			data, err := json.Marshal(&res)
			if err != nil {
				return stored, err
			}
			msgID := fg.msgID
			if msgID == "" {
				msgID = schemas.ResultMsgID(id, fg.token, 1)
			}
			msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
			msg.Header.Set(jetstream.MsgIDHeader, msgID)
			ack, err := f.JS.PublishMsg(ctx, msg)
			if err != nil {
				return stored, fmt.Errorf("forger: publish %s: %w", msgID, err)
			}
			if !ack.Duplicate {
				stored++
			}
		}
	}
	return stored, nil
}

// guessToken is a random token of the right shape: a guess.
func guessToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// AnswerFirst has a rogue voter that holds the job's sample requests (it
// reads them off spec's sample subject as they are published) answer the
// samples pick accepts, ahead of any voter: pick returns the result's
// outcome, vote, red flag and usage, and the rogue fills in the sample's
// position, sample id and token. A request's samples (Also) are asked
// one by one and those accepted answered in one message, as a voter
// does. It returns the count of answers published; the rogue stops at
// cleanup.
func (e *Env) AnswerFirst(spec schemas.JobSpec, pick func(req *schemas.SampleRequest) (schemas.SampleResult, bool)) *atomic.Int64 {
	e.TB.Helper()
	var published atomic.Int64
	sub, err := e.NC.Subscribe(e.Bus.Namespace.SampleSubject(spec.Tenant, spec.JobID), func(m *nats.Msg) {
		var wave schemas.SampleRequest
		if schemas.Decode(m.Data, &wave) != nil {
			return
		}
		var out *schemas.SampleResult
		for _, req := range wave.Members() {
			res, ok := pick(&req)
			if !ok {
				continue
			}
			res.Header = schemas.NewHeader(schemas.KindSampleResult)
			res.Tenant, res.JobID, res.SampleID, res.Token = req.Tenant, req.JobID, req.SampleID, req.Token
			res.Step, res.Epoch, res.Index, res.Attempt, res.Branch = req.Step, req.Epoch, req.Index, req.Attempt, req.Branch
			if res.VoterID == "" {
				res.VoterID = "rogue"
			}
			if out == nil {
				out = &res
				continue
			}
			out.Also = append(out.Also, res.Member())
		}
		if out == nil {
			return
		}
		data, err := schemas.Encode(out)
		if err != nil {
			e.TB.Errorf("rogue result: %v", err)
			return
		}
		if e.NC.Publish(e.Bus.Namespace.ResultSubject(wave.Tenant, wave.JobID, schemas.EpochGen(wave.Epoch)), data) == nil {
			published.Add(int64(1 + len(out.Also)))
		}
	})
	if err != nil {
		e.TB.Fatal(err)
	}
	if err := e.NC.Flush(); err != nil {
		e.TB.Fatal(err)
	}
	e.TB.Cleanup(func() { _ = sub.Unsubscribe() })
	return &published
}

// Ambush has a Forger strike at chosen steps of a hanoi job before the
// honest voter answers them: its Script holds the honest model's calls of
// those steps until Strike has published the forgeries for the step.
// With the honest voter at Concurrency 1, the rest of the step's first
// wave waits in the stream for the forger to pull.
type Ambush struct {
	steps            []int64
	once             []sync.Once
	reached, release []chan struct{}
}

// NewAmbush returns an ambush at steps, in the order the job reaches them.
func NewAmbush(steps ...int64) *Ambush {
	a := &Ambush{steps: steps, once: make([]sync.Once, len(steps))}
	for range steps {
		a.reached = append(a.reached, make(chan struct{}))
		a.release = append(a.release, make(chan struct{}))
	}
	return a
}

// Script answers as next does, once the forger has struck at the call's
// step (at once for other steps).
func (a *Ambush) Script(next Script) Script {
	return func(ctx context.Context, c Call) (llm.Response, error) {
		for i, s := range a.steps {
			if c.Step != s {
				continue
			}
			a.once[i].Do(func() { close(a.reached[i]) })
			select {
			case <-a.release[i]:
			case <-ctx.Done():
				return llm.Response{}, ctx.Err()
			}
		}
		return next(ctx, c)
	}
}

// Strike waits for the job (of disks disks, margin k) to reach each step
// of the ambush, then has f pull one of its requests and forge a wrong
// vote (the right move, the state left as it was) for indexes 0 to k,
// and lets the honest voter answer. It returns how many forgeries the
// stream stored.
func (a *Ambush) Strike(ctx context.Context, f Forger, disks, k int) (int, error) {
	keys, states := Golden(disks)
	forged := 0
	for i, step := range a.steps {
		select {
		case <-a.reached[i]:
		case <-ctx.Done():
			return forged, fmt.Errorf("the job never reached step %d: %w", step, ctx.Err())
		}
		req, err := f.Pull(ctx)
		if err != nil || req.Step != step {
			return forged, fmt.Errorf("the forger pulled %+v (%v), want a request of step %d", req, err, step)
		}
		right, err := hanoi.DecodeAnswer(keys[step])
		if err != nil {
			return forged, err
		}
		n, err := f.Forge(ctx, req, k+1, hanoi.Answer{Move: right.Move, NextState: states[step].Pegs}.Key())
		forged += n
		if err != nil {
			return forged, err
		}
		close(a.release[i])
	}
	return forged, nil
}
