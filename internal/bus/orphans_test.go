package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// TestPurgeOrphanResults (issue 9, finding 9): results no consumer will
// read (of a generation whose owner gave the job up, of a finished job)
// are removed; those of a generation whose consumer exists stay for its
// owner, and so does a result stored after the consumers were looked at.
func TestPurgeOrphanResults(t *testing.T) {
	t.Parallel()
	js, topo := dlqFleet(t)
	ns := topo.NS
	ctx := dlqCtx(t)
	// Job acme/j1 is owned under generation 2: its consumer reads
	// generation 2's subject only.
	if _, err := js.CreateOrUpdateConsumer(ctx, ns.ResultsStream(), jetstream.ConsumerConfig{
		Durable: bus.ResultConsumer("acme", "j1", 2), FilterSubject: ns.ResultSubject("acme", "j1", 2),
		AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, n int) {
		for range n {
			if _, err := js.Publish(ctx, subject, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	old := ns.ResultSubject("acme", "j1", 1)      // a stopped owner's generation
	current := ns.ResultSubject("acme", "j1", 2)  // read by its owner
	finished := ns.ResultSubject("acme", "j0", 5) // a job cleaned up
	publish(old, 3)
	publish(current, 2)
	publish(finished, 4)

	got, err := bus.PurgeOrphanResults(ctx, js, ns)
	if err != nil {
		t.Fatal(err)
	}
	if got[old] != 3 || got[finished] != 4 || len(got) != 2 || got.Total() != 7 {
		t.Errorf("purged %v, want 3 of %s and 4 of %s", got, old, finished)
	}
	s, err := js.Stream(ctx, ns.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 || info.State.Subjects[current] != 2 {
		t.Errorf("results stream holds %d messages %v, want the 2 of %s", info.State.Msgs, info.State.Subjects, current)
	}
	// Nothing left to remove: a second pass changes nothing.
	if got, err := bus.PurgeOrphanResults(ctx, js, ns); err != nil || got.Total() != 0 {
		t.Errorf("second pass purged %v (err %v), want nothing", got, err)
	}
}
