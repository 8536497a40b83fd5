package voter

// The fate of a sample whose model call failed: answered (a red flag, a
// cancellation) or handed back for another try, by this voter or another.

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
)

// failed is the fate of one sample whose model call failed: answered
// with res (a red flag, a cancellation; pause: the worker pauses once the
// answers are out), or handed back with fate, the worker's (res nil). See
// the package comment.
func (v *Voter) failed(ctx, callCtx context.Context, msg jetstream.Msg, req *schemas.SampleRequest, resp llm.Response, err error) (res *schemas.SampleResult, pause bool, fate error) {
	switch {
	case ctx.Err() != nil: // shutting down: the worker hands it back now
		v.handedBack.Add(1)
		return nil, false, err
	case callCtx.Err() != nil: // the step was decided meanwhile
		v.cancelled.Add(1)
		return &schemas.SampleResult{Outcome: schemas.OutcomeCancelled, LatencyMS: ms(resp.Latency)}, false, nil
	case errors.Is(err, llm.ErrBadResponse):
		// The server keeps answering, with nothing usable: asking
		// again would only get the same (the client tried a few
		// times). A red flag, as for an empty reply: the step draws
		// another sample, and no usage figure of it is counted.
		v.badReplies.Add(1)
		v.redFlags.Add(1)
		v.log.Warn("the model's replies cannot be used; answering the sample as a red flag", "err", err, "sample", req.SampleID)
		return modelRedFlag(schemas.RedFlagEmpty, err, ms(resp.Latency)), false, nil
	case errors.Is(err, llm.ErrProvider):
		// The provider refuses this voter's key or model (401, 403,
		// 404 model_not_found): the fleet's configuration, not the
		// sample. Answering it (a red flag) would spend the step's
		// samples on a fault of ours and could end the job without
		// consensus; so the sample is handed back for a voter that can
		// serve it, this voter reports not ready, and it fetches
		// nothing for a growing backoff (the messages go to voters that
		// can serve them meanwhile).
		v.modelErrors.Add(1)
		v.providerRefusals.Add(1)
		model := cmp.Or(req.Model, v.cfg.Model)
		record, holdOff := v.refusalScope(model, err)
		hold := v.cfg.ModelErrorDelay
		if record {
			hold = v.faults.refused(model, err, time.Now(), v.cfg.ModelErrorDelay)
		}
		if w := v.worker; w != nil && holdOff {
			w.HoldOff(time.Now().Add(hold))
		}
		if v.faultLog.Allow() {
			v.log.Error("the provider refuses this voter's key or a model; handing samples back (not fetching for the backoff when it is the key or the voter's own model), not ready until a call succeeds",
				"model", truncate(model, 64), "err", err, "sample", req.SampleID, "backoff", hold, "holding_off", holdOff)
		}
		v.notifyUnserved(ctx, msg, req, model, err)
		if v.lastDelivery(msg) {
			return nil, false, bus.Drop(err, "max_deliveries: "+truncate(err.Error(), 200))
		}
		return nil, false, bus.Retry(err, v.cfg.ModelErrorDelay)
	case errors.Is(err, llm.ErrPermanent):
		// Retrying this request cannot help (a request the model
		// will never take: 400, 422): answer it as a red-flagged
		// sample, with the reason. The step draws another sample in its place (perhaps
		// on a voter configured right), and a step no model will answer
		// reaches its sample cap and escalates or ends, rather than
		// waiting forever. The worker then pauses (pause).
		v.modelErrors.Add(1)
		v.redFlags.Add(1)
		v.log.Error("model refused the request; answering it as a red flag", "err", err, "sample", req.SampleID)
		return modelRedFlag(schemas.RedFlagRefused, err, 0), true, nil
	default:
		v.modelErrors.Add(1)
		v.notifyUnserved(ctx, msg, req, cmp.Or(req.Model, v.cfg.Model), err)
		return nil, false, v.handBack(msg, req, err)
	}
}

// handBack is the fate of a request whose model call failed for a reason
// of the model's or the provider's: handed back after ModelErrorDelay (or
// the server's longer Retry-After) for another try, by this voter or
// another; on the last delivery the consumer allows, dead-lettered here,
// where the request and the reason are in hand (the server drops a
// work-queue message once it gives up), and the coordinator samples the
// index again after its timeout.
func (v *Voter) handBack(msg jetstream.Msg, req *schemas.SampleRequest, err error) error {
	delay := v.cfg.ModelErrorDelay
	var later *llm.RetryLaterError
	if errors.As(err, &later) && later.Delay > delay {
		delay = later.Delay
	}
	if v.lastDelivery(msg) {
		v.log.Error("model call failed on the request's last delivery; dead-lettering it", "err", err, "sample", req.SampleID)
		return bus.Drop(err, "max_deliveries: "+truncate(err.Error(), 200))
	}
	v.log.Warn("model call failed; handing the sample back", "err", err, "sample", req.SampleID, "delay", delay)
	return bus.Retry(err, delay)
}

// refusalScope says what a provider's refusal of a call to model means
// for the whole voter. record: the fault counts for Ready, when model is
// the voter's own or one its policy names (a model allowed only through
// AnyModel is a job's choice, and a job must not make voters report not
// ready). holdOff: the voter stops fetching for the backoff, when its own
// model is refused, or the key (401: every call fails); a job's other
// model refused (403, 404) must not stop a voter that serves its own.
func (v *Voter) refusalScope(model string, err error) (record, holdOff bool) {
	own := model == v.cfg.Model
	record = own || slices.Contains(v.cfg.Policy.AllowModels, model)
	holdOff = own || llm.HTTPStatus(err) == http.StatusUnauthorized
	return record, holdOff
}

// lastDelivery reports whether msg is on the last delivery the consumer
// allows.
func (v *Voter) lastDelivery(msg jetstream.Msg) bool {
	md, err := msg.Metadata()
	return err == nil && v.maxDeliver.Load() > 0 && int64(md.NumDelivered) >= v.maxDeliver.Load()
}

// modelRedFlag answers a sample whose model call failed for good as a
// red flag with reason flag, the error as its detail.
func modelRedFlag(flag string, err error, latencyMS float64) *schemas.SampleResult {
	return &schemas.SampleResult{Outcome: schemas.OutcomeRedFlag, RedFlag: flag, Detail: "model: " + truncate(err.Error(), 200), LatencyMS: latencyMS}
}
