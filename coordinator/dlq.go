package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// deadLetters moves sample requests the voters gave up on (MaxDeliver
// deliveries, announced by the server's advisory) to the dead-letter
// stream, with the original payload and the reason, and removes them from
// the work queue, so nothing stays un-acked outside the DLQ. Coordinators
// share the work through a queue group; the DLQ's message ids make a
// repeat harmless.
func (c *Coordinator) deadLetters(ctx context.Context, topo *bus.Topology) {
	events := make(chan *nats.Msg, 256)
	sub, err := c.nc.ChanQueueSubscribe(bus.MaxDeliveriesAdvisory(topo.NS.SamplesStream(), bus.ConsumerVoters), "coordinators", events)
	if err != nil {
		c.log.Error("subscribe to max-deliveries advisories; poison requests will not reach the DLQ", "err", err)
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	for {
		select {
		case <-ctx.Done():
			return
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

func (c *Coordinator) deadLetter(ctx context.Context, topo *bus.Topology, ev bus.MaxDeliveriesEvent) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, ev.Stream)
	if err != nil {
		return err
	}
	raw, err := s.GetMsg(ctx, ev.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // handled already
	}
	if err != nil {
		return err
	}
	dl := schemas.DeadLetter{
		Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: ev.Stream, Seq: ev.StreamSeq,
		Subject: raw.Subject, Consumer: ev.Consumer, Reason: "max_deliveries", Deliveries: ev.Deliveries,
		Data: raw.Data, At: time.Now().UTC(),
	}
	if err := bus.PublishDeadLetter(ctx, c.js, topo.NS, &dl); err != nil {
		return err
	}
	c.log.Warn("sample request dead-lettered after max deliveries", "subject", raw.Subject, "seq", ev.StreamSeq, "deliveries", ev.Deliveries)
	if err := s.DeleteMsg(ctx, ev.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return err
	}
	return nil
}
