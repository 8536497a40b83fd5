package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// orphanSweepEvery is how often a coordinator removes the results no
// consumer will read (bus.PurgeOrphanResults) and restores missing parts
// of the topology; it also does once at start.
const orphanSweepEvery = time.Minute

// consumerCheckEvery is how often a coordinator checks that the shared
// consumers exist (voters wait for theirs while it is gone).
const consumerCheckEvery = 5 * time.Second

// deadLetters keeps the work queues free of what nobody will settle.
//
// It moves sample requests the voters gave up on (MaxDeliver deliveries,
// announced by the server's advisory) to the dead-letter stream, with the
// original payload (or, too large, a reference to it) and the reason, and
// removes them from the work queue, so nothing stays un-acked outside the
// DLQ. Coordinators share the work through a queue group; the DLQ's
// message ids make a repeat harmless.
//
// It creates again what an operator removed from the topology (the
// voters' consumer, say): voters do not create the topology, they wait
// for it, so it is the coordinators' to keep.
//
// And it removes late results nobody reads: those a voter published
// after the consumer of their job's lease generation was gone (the job
// taken over, or finished). Results of a generation whose owner still
// reads them are consumed by it and counted in its report as late
// (late_samples); these can no longer reach a report, so they are
// counted in the log.
func (c *Coordinator) deadLetters(ctx context.Context, topo *topology.Topology, sub *nats.Subscription, events <-chan *nats.Msg) {
	defer func() { _ = sub.Unsubscribe() }()
	sweep := time.NewTimer(0)
	defer sweep.Stop()
	check := time.NewTimer(consumerCheckEvery)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			c.sweepOrphans(ctx, topo)
			c.restoreTopology(ctx)
			sweep.Reset(orphanSweepEvery)
		case <-check.C:
			// Voters wait while their consumer is gone: a quick look
			// often, the whole topology with the sweep.
			if !c.consumersIntact(ctx, topo) {
				c.restoreTopology(ctx)
			}
			check.Reset(consumerCheckEvery)
		case m := <-events:
			var ev bus.MaxDeliveriesEvent
			if err := json.Unmarshal(m.Data, &ev); err != nil || ev.StreamSeq == 0 {
				c.log.Warn("unreadable max-deliveries advisory", "err", err)
				continue
			}
			if err := c.deadLetter(ctx, topo, ev); err != nil {
				c.log.Error("dead-letter a sample request", "seq", ev.StreamSeq, "err", err)
			}
		}
	}
}

func (c *Coordinator) deadLetter(ctx context.Context, topo *topology.Topology, ev bus.MaxDeliveriesEvent) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, ev.Stream)
	if err != nil {
		return err
	}
	dl := schemas.DeadLetter{
		Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: ev.Stream, Seq: ev.StreamSeq,
		Consumer: ev.Consumer, Reason: "max_deliveries", Deliveries: ev.Deliveries, At: time.Now().UTC(),
	}
	raw, err := s.GetMsg(ctx, ev.StreamSeq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// A work-queue server drops the message as it gives up on it.
		// Voters dead-letter a request on its last delivery themselves,
		// under the same message id, so this record is dropped as a
		// duplicate then; it stays only when that voter died holding it.
		dl.Subject = topo.NS.SampleSubject("unknown", "unknown")
		dl.Reason = "max_deliveries: the server removed the original; the voter holding its last delivery did not report it"
	case err != nil:
		return err
	default:
		dl.Subject, dl.Data = raw.Subject, raw.Data
	}
	if err := bus.PublishDeadLetter(ctx, c.js, topo.NS, &dl); err != nil {
		return err
	}
	if raw == nil {
		return nil
	}
	c.log.Warn("sample request dead-lettered after max deliveries", "subject", raw.Subject, "seq", ev.StreamSeq, "deliveries", ev.Deliveries)
	if err := s.DeleteMsg(ctx, ev.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return err
	}
	return nil
}

// sweepOrphans removes the results no consumer will read, and logs them.
func (c *Coordinator) sweepOrphans(ctx context.Context, topo *topology.Topology) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	removed, err := bus.PurgeOrphanResults(ctx, c.js, topo.NS, c.log)
	for subject, n := range removed {
		c.log.Info("removed late results no consumer reads (their job's lease generation ended)", "subject", subject, "late_results", n)
	}
	if err != nil && ctx.Err() == nil {
		c.log.Warn("remove late results no consumer reads; trying again later", "err", err)
	}
}

// restoreTopology creates what is missing from the topology again.
func (c *Coordinator) restoreTopology(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg := c.cfg.Bus
	cfg.StartupWait = time.Second // a server that does not answer: next time
	if _, err := topology.Ensure(ctx, c.js, cfg); err != nil && ctx.Err() == nil {
		c.log.Warn("restore the fleet topology; trying again later", "err", err)
	}
}

// consumersIntact reports whether the shared consumers exist (an answer
// other than "not found" counts as intact: the next look will tell).
func (c *Coordinator) consumersIntact(ctx context.Context, topo *topology.Topology) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, sc := range [][2]string{{topo.NS.SamplesStream(), bus.ConsumerVoters}, {topo.NS.JobsStream(), bus.ConsumerCoordinators}} {
		_, err := c.js.Consumer(ctx, sc[0], sc[1])
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return false
		}
	}
	return true
}
