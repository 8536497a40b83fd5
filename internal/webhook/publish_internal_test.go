package webhook

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestPublishOncePerDelivery: a delivery is one message on its subject;
// the same end queued again, even under another Msg-Id (past the
// duplicate window), is refused by the stream and taken by Publish as
// queued already.
func TestPublishOncePerDelivery(t *testing.T) {
	t.Parallel()
	js, topo := testkit.StartTopology(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := schemas.JobSpec{Tenant: "acme", JobID: "j1", Webhook: "https://hooks.example.com/x", SubmittedAt: time.Unix(7, 0)}
	task := JobTask(spec, schemas.JobReport{State: schemas.StateSolved, Solved: true, FinishedAt: time.Unix(9, 0)})
	for range 2 {
		if err := Publish(ctx, js, topo.NS, task); err != nil {
			t.Fatal(err)
		}
	}
	data, err := schemas.Encode(task)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: topo.NS.WebhookSubject("acme", task.ID), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, "another id")
	_, err = js.PublishMsg(ctx, msg)
	if err == nil || !queuedAlready(err) {
		t.Fatalf("a second message for the delivery: %v, want refused as queued already", err)
	}
	s, err := js.Stream(ctx, topo.NS.WebhooksStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("stream holds %d messages, want 1", info.State.Msgs)
	}
	// Another delivery is queued beside it.
	spec.JobID = "j2"
	if err := Publish(ctx, js, topo.NS, JobTask(spec, schemas.JobReport{State: schemas.StateFailed})); err != nil {
		t.Fatal(err)
	}
	if JobTask(schemas.JobSpec{Tenant: "acme", JobID: "j3"}, schemas.JobReport{}) != nil {
		t.Error("a job without a webhook has a delivery")
	}
}
