package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestQueueLag reads the voters' and coordinators' consumers of a real
// nats-server: messages not yet delivered are pending, a fetched one
// unacked is ack-pending; a consumer missing is left out.
func TestQueueLag(t *testing.T) {
	js, topo := testkit.StartTopology(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := topo.NS
	for i := range 3 {
		if _, err := js.Publish(ctx, ns.SampleSubject("acme", "job-1"), []byte(`{}`), jetstream.WithMsgID(string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.Consumer(ctx, ns.SamplesStream(), bus.ConsumerVoters)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() { // held, not acked
	}

	reg := metrics.NewRegistry("voter", "dev")
	q := reg.QueueLag(js,
		metrics.Consumer{Stream: ns.SamplesStream(), Name: bus.ConsumerVoters},
		metrics.Consumer{Stream: ns.JobsStream(), Name: bus.ConsumerCoordinators},
		metrics.Consumer{Stream: ns.JobsStream(), Name: "nobody"})
	want := `
# HELP maker_queue_ack_pending_messages Messages delivered to the consumer and not acknowledged yet (in hand).
# TYPE maker_queue_ack_pending_messages gauge
maker_queue_ack_pending_messages{consumer="coordinators",stream="MAKER_JOBS"} 0
maker_queue_ack_pending_messages{consumer="voters",stream="MAKER_SAMPLES"} 1
# HELP maker_queue_pending_messages Messages of the stream the consumer has not delivered yet (its lag).
# TYPE maker_queue_pending_messages gauge
maker_queue_pending_messages{consumer="coordinators",stream="MAKER_JOBS"} 0
maker_queue_pending_messages{consumer="voters",stream="MAKER_SAMPLES"} 2
`
	if err := testutil.GatherAndCompare(reg.Prometheus(), stringsReader(want),
		"maker_queue_pending_messages", "maker_queue_ack_pending_messages"); err != nil {
		t.Fatal(err)
	}
	// Within the second the read is cached: a new message shows later.
	if _, err := js.Publish(ctx, ns.SampleSubject("acme", "job-1"), []byte(`{}`), jetstream.WithMsgID("d")); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg.Prometheus(), stringsReader(want),
		"maker_queue_pending_messages", "maker_queue_ack_pending_messages"); err != nil {
		t.Fatalf("not cached: %v", err)
	}
	metrics.ExpireLag(q)
	got, err := testutil.GatherAndCount(reg.Prometheus(), "maker_queue_pending_messages")
	if err != nil || got != 2 {
		t.Fatalf("%d series, %v", got, err)
	}
	fams, err := reg.Prometheus().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "maker_queue_pending_messages" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == bus.ConsumerVoters && m.GetGauge().GetValue() != 3 {
				t.Errorf("after expiry voters pending %v, want 3", m.GetGauge().GetValue())
			}
		}
	}
}
