package fleettest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
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
