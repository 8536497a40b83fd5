package webhook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// Publisher is what Publish needs of JetStream.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// JobTask is the delivery of a job's end, spec's, as rep reports it; nil
// when the job names no webhook.
func JobTask(spec schemas.JobSpec, rep schemas.JobReport) *schemas.WebhookTask {
	if spec.Webhook == "" {
		return nil
	}
	at := rep.FinishedAt
	if at.IsZero() {
		at = time.Now().UTC()
	}
	return &schemas.WebhookTask{
		Header: schemas.NewHeader(schemas.KindWebhookTask), Tenant: spec.Tenant,
		ID: schemas.WebhookJobDeliveryID(spec.JobID, spec.SubmittedAt), URL: spec.Webhook,
		Event: schemas.WebhookEvent{Type: schemas.WebhookJobFinished, Timestamp: at.UTC(), Data: schemas.WebhookEventData{
			Tenant: spec.Tenant, JobID: spec.JobID, BatchID: spec.BatchID, State: rep.State, Reason: clip(rep.Reason),
			Report: &schemas.WebhookJobSummary{
				Solved: rep.Solved, Steps: rep.Steps, Samples: rep.Samples, Votes: rep.Votes,
				CostUSD: rep.CostUSD, WallSeconds: rep.WallSeconds,
			},
			Links: map[string]string{"self": "/v1/jobs/" + spec.JobID, "result": "/v1/jobs/" + spec.JobID + "/result"},
		}},
	}
}

// BatchTask is the delivery of rec's end; nil when the batch names no
// webhook or has not ended.
func BatchTask(rec schemas.BatchRecord) *schemas.WebhookTask {
	if rec.Webhook == "" || !schemas.BatchTerminal(rec.State) {
		return nil
	}
	at := time.Now().UTC()
	if rec.CompletedAt != nil {
		at = rec.CompletedAt.UTC()
	}
	counts := rec.Counts
	return &schemas.WebhookTask{
		Header: schemas.NewHeader(schemas.KindWebhookTask), Tenant: rec.Tenant,
		ID: schemas.WebhookBatchDeliveryID(rec.ID), URL: rec.Webhook,
		Event: schemas.WebhookEvent{Type: schemas.WebhookBatchFinished, Timestamp: at, Data: schemas.WebhookEventData{
			Tenant: rec.Tenant, BatchID: rec.ID, State: rec.State, Counts: &counts,
			Links: map[string]string{"self": "/v1/batches/" + rec.ID, "output": "/v1/batches/" + rec.ID + "/output"},
		}},
	}
}

func clip(s string) string {
	if len(s) <= schemas.MaxWebhookReason {
		return s
	}
	return s[:schemas.MaxWebhookReason-3] + "..."
}

// Publish queues t (nil: nothing) on the webhook stream of ns, its
// delivery id the Msg-Id: a task published again within the stream's
// duplicate window is stored once (and a later one is not delivered
// again: its record says it was).
func Publish(ctx context.Context, js Publisher, ns bus.Namespace, t *schemas.WebhookTask) error {
	if t == nil {
		return nil
	}
	data, err := schemas.Encode(t)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	msg := &nats.Msg{Subject: ns.WebhookSubject(t.Tenant, t.ID), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, t.Tenant+"/"+t.ID)
	_, err = bus.RetryTransient(ctx, 10*time.Second, func(ctx context.Context) (*jetstream.PubAck, error) {
		return js.PublishMsg(ctx, msg)
	})
	if queuedAlready(err) {
		return nil // the same delivery waits in the stream (one message per subject)
	}
	if err != nil {
		return fmt.Errorf("webhook: queue delivery %s/%s: %w", t.Tenant, t.ID, err)
	}
	return nil
}

// queuedAlready reports whether err is the stream refusing a second
// message on a delivery's subject: that delivery is queued already.
func queuedAlready(err error) bool {
	var api *jetstream.APIError
	return bus.LimitReached(err) && errors.As(err, &api) && strings.Contains(api.Description, "per subject")
}

// RecordKey is a delivery's key in the webhooks bucket.
func RecordKey(tenant, id string) string { return tenant + "." + id }
