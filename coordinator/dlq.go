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
func (c *Coordinator) deadLetters(ctx context.Context, topo *bus.Topology, sub *nats.Subscription, events <-chan *nats.Msg) {
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
