package coordinator_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestMaxDeliveriesToDLQ: a sample request delivered MaxDeliver times
// without an answer (a poison request: every voter hands it back) is moved
// by a coordinator to the dead-letter stream, with its payload and the
// reason, and removed from the work queue, so nothing is left un-acked.
func TestMaxDeliveriesToDLQ(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := env.Topo.NS
	cons, err := env.JS.Consumer(ctx, ns.SamplesStream(), bus.ConsumerVoters)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cons.CachedInfo().Config
	cfg.MaxDeliver = 2
	if cons, err = env.JS.UpdateConsumer(ctx, ns.SamplesStream(), cfg); err != nil {
		t.Fatal(err)
	}
	env.StartCoordinator(coordinator.Config{})
	jobsCons, err := env.JS.Consumer(ctx, ns.JobsStream(), bus.ConsumerCoordinators)
	if err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 10*time.Second, func() bool {
		info, err := jobsCons.Info(ctx)
		return err == nil && info.NumWaiting > 0
	}, "the coordinator is not pulling jobs")

	poison := []byte(`{"version":1,"kind":"sample_request","note":"every voter hands this back"}`)
	if _, err := env.JS.Publish(ctx, ns.SampleSubject("acme", "j1"), poison); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a voter that fails on it, twice
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if err := m.Nak(); err != nil {
				t.Fatal(err)
			}
		}
		if n != 1 {
			t.Fatalf("fetched %d messages, want the poison request", n)
		}
	}

	// Voters keep pulling; the server gives up on the request (and
	// announces it) when it would deliver it a third time.
	if batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second)); err == nil {
		for m := range batch.Messages() {
			t.Errorf("delivered a third time: %s", m.Data())
		}
	}

	var dls []schemas.StoredDeadLetter
	fleettest.Eventually(t, 20*time.Second, func() bool {
		dls, err = bus.ListDeadLetters(ctx, env.JS, ns, "", "", 10)
		return err == nil && len(dls) == 1
	}, "the poison request did not reach the DLQ: %v %v", dls, err)
	// Servers that keep the message until it is settled give the payload;
	// a work-queue server drops it as it gives up, and the record says so
	// (voters dead-letter a request on its last delivery themselves, with
	// the payload: see the voter's tests).
	d := dls[0]
	kept := bytes.Equal(d.Data, poison) && d.Subject == ns.SampleSubject("acme", "j1") && d.Reason == "max_deliveries"
	dropped := len(d.Data) == 0 && strings.HasPrefix(d.Reason, "max_deliveries: the server removed the original")
	if !(kept || dropped) || d.Deliveries != 2 || d.Consumer != bus.ConsumerVoters || d.Stream != ns.SamplesStream() {
		t.Errorf("dead letter %+v: want max_deliveries after 2 deliveries, with the payload or saying why it is gone", d)
	}
	fleettest.Eventually(t, 10*time.Second, func() bool {
		s, err := env.JS.Stream(ctx, ns.SamplesStream())
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, "the poison request is still in the work queue")
}
