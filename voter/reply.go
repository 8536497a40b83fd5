package voter

// Answers on the wire: a request's results, as few messages as they come
// (SampleResult.Also), and the notices that tell a job why it waits.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/sampling"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Judge turns a model response into a sample result: the vote, or the red
// flag that throws it away (sampling.Judge, which calibration shares).
// Exported for tests and tools.
func Judge(inst task.Instance, req *schemas.SampleRequest, resp llm.Response) schemas.SampleResult {
	return sampling.Judge(inst, req.State, req.MaxOutputTokens, resp)
}

// replyMany publishes results, those of reqs (members of one request,
// in order), in as few messages as their models allow: one, where every
// answer names the same model (SampleResult.Also). Only then is the
// request acked (by the worker, on nil); if a result cannot be published,
// the error hands the request back instead.
func (v *Voter) replyMany(ctx context.Context, msg jetstream.Msg, reqs []*schemas.SampleRequest, results []schemas.SampleResult) error {
	for i := range results {
		stamp(reqs[i], &results[i])
		if results[i].Model == "" {
			results[i].Model = v.cfg.Model
		}
	}
	for len(results) > 0 {
		first := results[0]
		first.Also = nil
		rest := 0
		for i := 1; i < len(results); i++ {
			if results[i].Model != first.Model {
				// Another model answered it (a router's deployment):
				// it goes in a message of its own model.
				results[1+rest], results[i] = results[i], results[1+rest]
				reqs[1+rest], reqs[i] = reqs[i], reqs[1+rest]
				rest++
				continue
			}
			first.Also = append(first.Also, results[i].Member())
		}
		if err := v.publish(ctx, msg, reqs[0], &first); err != nil {
			return err
		}
		v.cfg.Metrics.Answered(first.Model, first.RedFlag)
		for _, m := range first.Also {
			v.cfg.Metrics.Answered(first.Model, m.RedFlag)
		}
		results, reqs = results[1:1+rest], reqs[1:1+rest]
	}
	return nil
}

// replyAll answers every sample req asks for (itself and Also) with res.
func (v *Voter) replyAll(ctx context.Context, msg jetstream.Msg, req *schemas.SampleRequest, res schemas.SampleResult) error {
	members := req.Members()
	reqs := make([]*schemas.SampleRequest, len(members))
	results := make([]schemas.SampleResult, len(members))
	for i := range members {
		reqs[i], results[i] = &members[i], res
	}
	return v.replyMany(ctx, msg, reqs, results)
}

// unservedEvery spaces a voter's unserved notices to one job: the job
// needs to know why it waits, not every sample handed back.
const unservedEvery = time.Second

// notifyUnserved tells req's job that its sample is handed back
// unanswered because the model could not be served (schemas.
// OutcomeUnserved: the job's status says provider_unavailable, the model
// and err), at most once a second per job. Best effort: the sample is
// handed back whether or not the notice goes out.
func (v *Voter) notifyUnserved(ctx context.Context, msg jetstream.Msg, req *schemas.SampleRequest, model string, err error) {
	v.notify(ctx, msg, req, schemas.SampleResult{Outcome: schemas.OutcomeUnserved, Model: model, Detail: truncate(err.Error(), schemas.MaxUnservedDetail)})
}

// notifyRefused tells the job its request cannot run here (the task, its
// params or its state), as an unserved notice of cause task: the job's
// status then says why it waits, where a dead letter alone says nothing
// to its tenant.
func (v *Voter) notifyRefused(ctx context.Context, msg jetstream.Msg, req *schemas.SampleRequest, err error) {
	v.notify(ctx, msg, req, schemas.SampleResult{Outcome: schemas.OutcomeUnserved, Cause: schemas.UnservedTask, Detail: truncate(err.Error(), schemas.MaxUnservedDetail)})
}

// notify sends an unserved notice as req's result, at most one a second
// per job.
func (v *Voter) notify(ctx context.Context, msg jetstream.Msg, req *schemas.SampleRequest, res schemas.SampleResult) {
	key := req.Tenant + "/" + req.JobID
	now := time.Now()
	if last, ok := v.unserved.Get(key); ok && now.Sub(last) < unservedEvery {
		return
	}
	v.unserved.Put(key, now)
	if perr := v.publish(ctx, msg, req, &res); perr != nil {
		v.log.Debug("cannot tell the job why its sample is not answered", "err", perr, "sample", req.SampleID)
	}
}

// resultBufs are publish's buffers, one a result being published.
var resultBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// stamp gives res req's identity: the job, the sample, its token and
// this voter.
func stamp(req *schemas.SampleRequest, res *schemas.SampleResult) {
	res.Header = schemas.NewHeader(schemas.KindSampleResult)
	res.Tenant, res.JobID, res.SampleID = req.Tenant, req.JobID, req.SampleID
	res.Step, res.Epoch, res.Index, res.Attempt, res.Branch = req.Step, req.Epoch, req.Index, req.Attempt, req.Branch
	res.Token = req.Token // the sample's capability: the coordinator counts only results that hold it
}

// publish sends res (with its Also) as req's result (see replyMany).
func (v *Voter) publish(ctx context.Context, msg jetstream.Msg, req *schemas.SampleRequest, res *schemas.SampleResult) error {
	stamp(req, res)
	res.VoterID = v.cfg.ID
	if res.Model == "" {
		res.Model = v.cfg.Model
	}
	buf := resultBufs.Get().(*[]byte)
	defer resultBufs.Put(buf)
	data, err := schemas.AppendSampleResult((*buf)[:0], res)
	if err != nil {
		v.log.Error("encode result", "err", err)
		return fmt.Errorf("voter: encode result: %w", err)
	}
	*buf = data // NATS copies it as it publishes: the buffer serves the next result
	out := &nats.Msg{Subject: v.cfg.Bus.Namespace.ResultSubject(req.Tenant, req.JobID, schemas.EpochGen(req.Epoch)), Data: data, Header: nats.Header{}}
	// One id per delivery: a retried publish of this answer is dropped by
	// the stream, while a second delivery's answer (a second model call)
	// is kept and counted as a duplicate by the tally. The id holds the
	// token, so no one without it can take the id first.
	delivery := uint64(1)
	if md, err := msg.Metadata(); err == nil {
		delivery = md.NumDelivered
	}
	out.Header.Set(jetstream.MsgIDHeader, schemas.ResultMsgID(req.SampleID, req.Token, delivery))
	traceReply(ctx, req, res, out.Header, len(data), v.nc.MaxPayload())
	// Retried for at most ResultPublishRetry: the results stream's
	// duplicate window outlasts it (topology.MinWorkDuplicates).
	pubCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), topology.ResultPublishRetry)
	defer cancel()
	var perr error
	for attempt := 0; attempt < 5; attempt++ {
		if _, perr = v.js.PublishMsg(pubCtx, out); perr == nil {
			return nil
		}
		if pubCtx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(50<<attempt) * time.Millisecond)
	}
	v.log.Warn("publish result failed; handing the sample back", "err", perr, "sample", req.SampleID)
	return fmt.Errorf("voter: publish result: %w", perr)
}
