package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/internal/webhook"
	"github.com/makerfleet/makerfleet/schemas"
)

// pullWebhooks pulls (and acks) what the webhook consumer holds.
func pullWebhooks(ns bus.Namespace) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		js, err := jetstream.New(c.Conn)
		if err != nil {
			return err
		}
		cons, err := js.Consumer(ctx, ns.WebhooksStream(), bus.ConsumerWebhooks)
		if err != nil {
			return err
		}
		batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			if err := m.Ack(); err != nil {
				return err
			}
		}
		return batch.Error()
	}
}

// publishTask queues a well-formed delivery task for tenant acme.
func publishTask(ns bus.Namespace, id string) action {
	return func(ctx context.Context, c *authtest.Conn) error {
		js, err := jetstream.New(c.Conn)
		if err != nil {
			return err
		}
		spec := schemas.JobSpec{Tenant: "acme", JobID: id, Webhook: "https://hooks.example.com/x", SubmittedAt: time.Unix(7, 0)}
		rep := schemas.JobReport{State: schemas.StateSolved, Solved: true, FinishedAt: time.Unix(9, 0)}
		return webhook.Publish(ctx, js, ns, webhook.JobTask(spec, rep))
	}
}

// TestAuthWebhooks: on a secured server the coordinators (and the api,
// for a batch that ends at once) queue webhook deliveries and only the
// api pulls them and records their attempts; a voter whose credentials
// leaked can neither queue a forged delivery (a POST signed with a
// tenant's key to a URL of its choosing) nor pull one, write a record,
// or read the bucket that keeps the master secret.
func TestAuthWebhooks(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	ns := bus.DefaultNamespace
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	coord := srv.Connect(t, auth.Coordinator)
	js, err := jetstream.New(coord.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topology.Ensure(ctx, js, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatalf("the coordinator makes the topology: %v (violations %v)", err, coord.Violations())
	}
	b := ns.WebhooksBucket()
	forged := ns.WebhookSubject("acme", "job_forged_1")
	runRefusals(ctx, t, srv, []refusal{
		{"coordinator queues a delivery", auth.Coordinator, publishTask(ns, "j1"), ""},
		{"api queues a delivery", auth.API, publishTask(ns, "j2"), ""},
		{"api pulls deliveries", auth.API, pullWebhooks(ns), ""},
		{"api records an attempt", auth.API, kvPut(b, "acme.job_j1_7000"), ""},
		{"api reads the master secret", auth.API, kvGet(b, "_secret.master"), ""},
		{"voter queues a forged delivery", auth.Voter, jsPublish(forged), forged},
		{"voter pulls deliveries", auth.Voter, pullWebhooks(ns), "$JS.API.CONSUMER.MSG.NEXT." + ns.WebhooksStream() + "." + bus.ConsumerWebhooks},
		{"voter writes a delivery record", auth.Voter, kvPut(b, "acme.job_j1_7000"), "$KV." + b + ".acme.job_j1_7000"},
		{"voter reads the master secret", auth.Voter, kvGet(b, "_secret.master"),
			"$JS.API.DIRECT.GET.KV_" + b + ".$KV." + b + "._secret.master"},
		{"approver queues a forged delivery", auth.Approver, jsPublish(forged), forged},
	})
}
