// Package journal is a job's durable decision log on JetStream: every
// decided step and every change of owner, appended with an expected last
// subject sequence so two writers can never both append after the same
// entry, plus checkpoints that let a new owner resume without reading the
// log from the start.
//
// A job has two subjects in the journal stream: the entries (decisions by
// votes or by an arbiter, takeovers, escalations and the end, in order)
// and the checkpoints. A new owner reads the last
// checkpoint, then only the entries after it, then appends a takeover entry
// under its lease token: from that append on, an older owner's next append
// fails (its expected sequence is stale), so a step is never decided twice.
package journal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// ErrFenced means another writer appended first: this writer no longer
// owns the job.
var ErrFenced = errors.New("journal: fenced: another owner appended")

// ErrCorrupt means the journal holds something this build cannot read or
// that breaks its order; the job cannot be resumed safely.
var ErrCorrupt = errors.New("journal: corrupt")

// Entry is a journal entry with its stream sequence.
type Entry struct {
	Seq uint64
	schemas.JournalEntry
}

// Journal appends to one job's journal as one owner. It is not safe for
// concurrent use.
type Journal struct {
	js      jetstream.JetStream
	stream  string
	subject string
	ckptSj  string
	lastSeq uint64 // last sequence on subject, as this writer knows it
	ckpts   int    // checkpoints this writer wrote

	// the append in flight (Start), if any
	inflight jetstream.PubAckFuture
	infMsg   *nats.Msg
	infID    string
}

// Resume is what a new owner reads before it appends.
type Resume struct {
	// Checkpoint is the last checkpoint, nil if none.
	Checkpoint *schemas.Checkpoint
	// Entries are the entries after the checkpoint, in order.
	Entries []Entry
}

// Open reads tenant/job's resume point and returns a Journal positioned to
// append after the last entry. The entries after the last checkpoint are
// read, so Open costs at most one checkpoint interval, whatever the job's
// length.
func Open(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, tenant, job string) (*Journal, *Resume, error) {
	j := &Journal{
		js:      js,
		stream:  ns.JournalStream(),
		subject: ns.JournalSubject(tenant, job),
		ckptSj:  ns.CheckpointSubject(tenant, job),
	}
	s, err := js.Stream(ctx, j.stream)
	if err != nil {
		return nil, nil, fmt.Errorf("journal: stream: %w", err)
	}
	res := &Resume{}
	if m, err := lastMsg(ctx, s, j.ckptSj); err != nil {
		return nil, nil, err
	} else if m != nil {
		var c schemas.Checkpoint
		if err := schemas.Decode(m.Data, &c); err != nil {
			return nil, nil, fmt.Errorf("%w: checkpoint at %d: %w", ErrCorrupt, m.Sequence, err)
		}
		res.Checkpoint = &c
	}
	last, err := lastMsg(ctx, s, j.subject)
	if err != nil {
		return nil, nil, err
	}
	if last == nil {
		return j, res, nil
	}
	j.lastSeq = last.Sequence
	from := uint64(1)
	if res.Checkpoint != nil {
		from = res.Checkpoint.JournalSeq + 1
	}
	if from > j.lastSeq {
		return j, res, nil
	}
	err = j.read(ctx, from, j.lastSeq, func(e Entry) error {
		res.Entries = append(res.Entries, e)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return j, res, nil
}

// read passes fn the entries on the subject with sequences in [from, to],
// in order.
func (j *Journal) read(ctx context.Context, from, to uint64, fn func(Entry) error) error {
	err := bus.ReadOrdered(ctx, j.js, bus.ReadRange{Stream: j.stream, Subjects: []string{j.subject}, From: from, To: to},
		func(seq uint64, data []byte) error {
			var e schemas.JournalEntry
			if err := schemas.Decode(data, &e); err != nil {
				return fmt.Errorf("%w: entry at %d: %w", ErrCorrupt, seq, err)
			}
			return fn(Entry{Seq: seq, JournalEntry: e})
		})
	if errors.Is(err, bus.ErrReadStalled) {
		return fmt.Errorf("journal: read: entries up to %d did not arrive: %w", to, err)
	}
	return err
}

func lastMsg(ctx context.Context, s jetstream.Stream, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: last of %s: %w", subject, err)
	}
	return m, nil
}

// LastSeq is the sequence of the last entry this writer knows of.
func (j *Journal) LastSeq() uint64 { return j.lastSeq }

func entryID(e *schemas.JournalEntry) string {
	id := e.Tenant + "/" + e.JobID + "/" + e.Type + "/" + strconv.FormatInt(e.Step, 10) + "/" + strconv.FormatInt(e.Token, 10)
	if e.Type == schemas.EntryEscalation {
		// One owner may climb a step's ladder more than one rung.
		id += "/" + e.Rung
	}
	return id
}

// Append adds e after the last entry and waits until it is stored.
// ErrFenced means another owner appended since: e was not written. A reply
// lost on the way is retried under the same message id, so e is written
// once.
func (j *Journal) Append(ctx context.Context, e *schemas.JournalEntry) (uint64, error) {
	if err := j.Flush(ctx); err != nil {
		return 0, err
	}
	seq, err := j.publish(ctx, j.subject, e, entryID(e), j.lastSeq)
	if err != nil {
		return 0, err
	}
	j.lastSeq = seq
	return seq, nil
}

// Start appends e without waiting for the server, after settling the
// append before it: the caller may work on while e is stored, and the
// next Start, Append, Flush or Checkpoint waits for it. An error is that
// of the previous append (ErrFenced among them): e was not sent then.
// Entries stay strictly ordered, each fenced on the one before.
func (j *Journal) Start(ctx context.Context, e *schemas.JournalEntry) error {
	if err := j.Flush(ctx); err != nil {
		return err
	}
	data, err := schemas.Encode(e)
	if err != nil {
		return fmt.Errorf("journal: encode: %w", err)
	}
	id := entryID(e)
	msg := &nats.Msg{Subject: j.subject, Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	f, err := j.js.PublishMsgAsync(msg, j.fence(j.subject, j.lastSeq))
	if err != nil {
		// Not sent: Flush sends it the slow way.
		f = nil
	}
	j.inflight, j.infMsg, j.infID = f, msg, id
	return nil
}

// Flush waits until the append in flight (Start) is stored.
func (j *Journal) Flush(ctx context.Context) error {
	if j.infMsg == nil {
		return nil
	}
	msg, id, f := j.infMsg, j.infID, j.inflight
	j.inflight, j.infMsg, j.infID = nil, nil, ""
	if f != nil {
		select {
		case ack := <-f.Ok():
			j.lastSeq = ack.Sequence
			return nil
		case err := <-f.Err():
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
				if seq, ok := j.landed(ctx, j.subject, id); ok {
					j.lastSeq = seq
					return nil
				}
				return fmt.Errorf("%w: %s after sequence %d", ErrFenced, j.subject, j.lastSeq)
			}
			// Lost or refused on the way: retry it the slow way below.
		case <-time.After(5 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	seq, err := j.publishMsg(ctx, msg, id, j.lastSeq)
	if err != nil {
		return err
	}
	j.lastSeq = seq
	return nil
}

// Checkpoint stores c as the job's resume point, after the append in
// flight is stored. c.JournalSeq should be LastSeq after a Flush.
func (j *Journal) Checkpoint(ctx context.Context, c *schemas.Checkpoint) error {
	if err := j.Flush(ctx); err != nil {
		return err
	}
	// A counter in the id: two checkpoints at one journal position (a
	// periodic one, then a pause) differ, and the duplicate window must
	// not drop the second.
	j.ckpts++
	id := c.Tenant + "/" + c.JobID + "/c/" + strconv.FormatUint(c.JournalSeq, 10) + "/" + strconv.FormatInt(c.Token, 10) + "/" + strconv.Itoa(j.ckpts)
	// Fenced on the entries, like an append: once a new owner's takeover
	// entry is in, an old owner's checkpoint is refused.
	_, err := j.publish(ctx, j.ckptSj, c, id, j.lastSeq)
	return err
}

// publish appends m to subject if its last sequence is still last, with
// message id id. A failed attempt whose write did land (the reply was lost)
// is recognised by the id of the subject's last message.
func (j *Journal) publish(ctx context.Context, subject string, m schemas.Message, id string, last uint64) (uint64, error) {
	data, err := schemas.Encode(m)
	if err != nil {
		return 0, fmt.Errorf("journal: encode: %w", err)
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	return j.publishMsg(ctx, msg, id, last)
}

// fence is the publish option that makes a write to subject conditional on
// the entries subject's last sequence being last. (For a checkpoint, on
// another subject, it needs nats-server 2.11 or later.)
func (j *Journal) fence(subject string, last uint64) jetstream.PublishOpt {
	if subject == j.subject {
		return jetstream.WithExpectLastSequencePerSubject(last)
	}
	return jetstream.WithExpectLastSequenceForSubject(last, j.subject)
}

// publishMsg appends msg (message id id) to its subject if last is still
// the subject's last sequence.
func (j *Journal) publishMsg(ctx context.Context, msg *nats.Msg, id string, last uint64) (uint64, error) {
	subject := msg.Subject
	msg.Header.Del(jetstream.ExpectedLastSubjSeqHeader)
	msg.Header.Del(jetstream.ExpectedLastSubjSeqSubjHeader)
	var lastErr error
	for attempt := 0; attempt < 8; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(time.Duration(100<<min(attempt, 5)) * time.Millisecond):
			}
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := j.js.PublishMsg(actx, msg, j.fence(subject, last))
		cancel()
		if err == nil {
			return ack.Sequence, nil
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			// Ours, if an earlier attempt landed; else another writer's.
			if seq, ok := j.landed(ctx, subject, id); ok {
				return seq, nil
			}
			return 0, fmt.Errorf("%w: %s after sequence %d", ErrFenced, subject, last)
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		lastErr = err
	}
	return 0, fmt.Errorf("journal: append to %s: %w", subject, lastErr)
}

// landed reports whether the last message on subject has message id id.
func (j *Journal) landed(ctx context.Context, subject, id string) (uint64, bool) {
	s, err := j.js.Stream(ctx, j.stream)
	if err != nil {
		return 0, false
	}
	m, err := lastMsg(ctx, s, subject)
	if err != nil || m == nil || m.Header.Get(jetstream.MsgIDHeader) != id {
		return 0, false
	}
	return m.Sequence, true
}

// ReadAll streams every entry of tenant/job's journal to fn, in order: for
// tools and tests (checking a whole journal), not for resuming.
func ReadAll(ctx context.Context, js jetstream.JetStream, ns bus.Namespace, tenant, job string, fn func(Entry) error) error {
	j := &Journal{js: js, stream: ns.JournalStream(), subject: ns.JournalSubject(tenant, job)}
	s, err := js.Stream(ctx, j.stream)
	if err != nil {
		return fmt.Errorf("journal: stream: %w", err)
	}
	last, err := lastMsg(ctx, s, j.subject)
	if err != nil || last == nil {
		return err
	}
	return j.read(ctx, 1, last.Sequence, fn)
}
