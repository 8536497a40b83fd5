package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadRange says what ReadOrdered reads.
type ReadRange struct {
	// Stream to read (required).
	Stream string
	// Subjects filters the stream; none reads every subject.
	Subjects []string
	// From is the first stream sequence to read. Default 0: the first.
	From uint64
	// To, when set, is the last stream sequence to read: the read ends at
	// the first message at or past it, and fails with ErrReadStalled if it
	// never comes. Default 0: read until no message is left pending.
	To uint64
}

// Ordered reads wait this long for a pending message that does not come
// before they fail, polling every readPoll meanwhile.
const (
	readStall = 5 * time.Second
	readPoll  = 50 * time.Millisecond
)

// ReadOrdered passes fn the stream sequence and payload of every message
// in r, in order, through an ordered consumer. fn may return ErrStopRead
// to end the read early without an error; any other error ends it and is
// returned. A read that finds messages pending that do not arrive within
// a few seconds fails with ErrReadStalled.
//
// It fetches without waiting and takes every message of each batch, even
// past the end or an error: a fetch left waiting, or a batch not emptied,
// would leave its goroutine running after the read returns.
func ReadOrdered(ctx context.Context, js jetstream.JetStream, r ReadRange, fn func(seq uint64, data []byte) error) error {
	if r.To > 0 && r.From > r.To {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: r.Subjects, DeliverPolicy: jetstream.DeliverAllPolicy}
	if r.From > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, r.From
	}
	cons, err := js.OrderedConsumer(ctx, r.Stream, cfg)
	if err != nil {
		return fmt.Errorf("bus: read %s: %w", r.Stream, err)
	}
	// Reading to the end: nothing pending (now, or any more) is the end.
	drained := func() (bool, error) {
		if r.To > 0 {
			return false, nil
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return false, fmt.Errorf("bus: read %s: %w", r.Stream, err)
		}
		return info.NumPending == 0, nil
	}
	if end, err := drained(); end || err != nil {
		return err
	}
	idleSince := time.Now()
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return fmt.Errorf("bus: read %s: %w", r.Stream, err)
		}
		n, done := 0, false
		var ferr error
		for m := range batch.Messages() {
			n++
			if done || ferr != nil {
				continue // drained, so the fetch's goroutine ends
			}
			md, err := m.Metadata()
			if err != nil {
				ferr = fmt.Errorf("bus: read %s: %w", r.Stream, err)
				continue
			}
			seq := md.Sequence.Stream
			if err := fn(seq, m.Data()); err != nil {
				ferr = err
				continue
			}
			done = r.To > 0 && seq >= r.To || r.To == 0 && md.NumPending == 0
		}
		switch {
		case errors.Is(ferr, ErrStopRead):
			return nil
		case ferr != nil:
			return ferr
		case done:
			return nil
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("bus: read %s: %w", r.Stream, err)
		}
		if n > 0 {
			idleSince = time.Now()
			continue
		}
		// Nothing yet: the ordered consumer may still be starting, or what
		// was pending is gone (deleted, aged out).
		if end, err := drained(); end || err != nil {
			return err
		}
		if time.Since(idleSince) > readStall {
			return fmt.Errorf("%w: %s %v: messages pending (up to sequence %d) did not arrive within %s",
				ErrReadStalled, r.Stream, r.Subjects, r.To, readStall)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(readPoll):
		}
	}
}

// SubjectSeq returns the stream sequence of the first message of stream
// on subject (the last one, with last), 0 when it has none. It reads
// through a filtered ordered consumer, removed after: the read a client
// may be allowed for some subjects only (the server checks the filter a
// consumer create names), where a message get, by sequence or as the
// last of a subject, may read any message of the stream.
func SubjectSeq(ctx context.Context, js jetstream.JetStream, stream, subject string, last bool) (uint64, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverAllPolicy}
	if last {
		cfg.DeliverPolicy = jetstream.DeliverLastPolicy
	}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return 0, fmt.Errorf("bus: read %s: %w", stream, err)
	}
	name := cons.CachedInfo().Name
	defer func() { _ = js.DeleteConsumer(context.WithoutCancel(ctx), stream, name) }()
	if cons.CachedInfo().NumPending == 0 {
		return 0, nil
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(readStall))
	if err != nil {
		return 0, fmt.Errorf("bus: read %s: %w", stream, err)
	}
	var seq uint64
	for m := range batch.Messages() {
		if md, err := m.Metadata(); err == nil {
			seq = md.Sequence.Stream
		}
	}
	if err := batch.Error(); err != nil && seq == 0 {
		return 0, fmt.Errorf("bus: read %s: %w", stream, err)
	}
	if seq == 0 {
		return 0, fmt.Errorf("%w: %s %s: a message pending did not arrive", ErrReadStalled, stream, subject)
	}
	return seq, nil
}
