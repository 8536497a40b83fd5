package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/dashboard"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
)

// jobSteps is GET /v1/jobs/{id}/steps: Server-Sent Events for the
// dashboard. "step" (id: the journal sequence; data: a step_summary of
// each journal entry, schemas.StepSummary), from the first entry or after
// ?after= / Last-Event-ID, then each new one as it is written; "status" (a
// job_status) now and on every change. Once the job has its report and
// every entry up to its end has been sent, a last status goes out and the
// stream ends. ": ping" every Heartbeat.
//
// The stream shares the event streams' limits (MaxStreamsPerKey,
// MaxStreams), ends when its key is revoked, and cuts off a client that
// reads nothing for StreamWriteTimeout.
func (s *Server) jobSteps(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	tenant, id, err := jobRef(r, p)
	if err != nil {
		return err
	}
	after, err := resumeAfter(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	topo := s.deps.Topo
	gctx, gcancel := s.timeout(ctx)
	_, _, err = jobs.Get(gctx, topo, tenant, id)
	gcancel()
	if err != nil {
		return err
	}
	release, pe := s.streams.take(p)
	if pe != nil {
		return pe
	}
	defer release()

	key := bus.JobKey(tenant, id)
	// Watch first, then read: no change falls between the two.
	reports, err := topo.Reports.Watch(ctx, key)
	if err != nil {
		return fmt.Errorf("%w: watch report: %w", jobs.ErrUnavailable, err)
	}
	defer func() { _ = reports.Stop() }()
	statuses, err := topo.Status.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("%w: watch status: %w", jobs.ErrUnavailable, err)
	}
	defer func() { _ = statuses.Stop() }()
	entries, err := s.followJournal(ctx, tenant, id, after)
	if err != nil {
		return err
	}
	defer entries.stop()

	rc := http.NewResponseController(w)
	out := &deadlineWriter{w: w, rc: rc, d: s.cfg.StreamWriteTimeout}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	var last []byte
	sendStatus := func() error {
		if s.keyRevoked(ctx, r) {
			return errKeyRevoked
		}
		sctx, scancel := s.timeout(ctx)
		st, err := jobs.Status(sctx, topo, tenant, id)
		scancel()
		if err != nil {
			return err
		}
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if string(b) == string(last) {
			return nil
		}
		last = b
		return event(out, "status", b)
	}
	if err := sendStatus(); err != nil {
		return nil // the stream has begun: it just ends
	}
	var ping <-chan time.Time
	if s.cfg.Heartbeat > 0 {
		t := time.NewTicker(s.cfg.Heartbeat)
		defer t.Stop()
		ping = t.C
	}
	// endSeq is the journal's last sequence once the job has its report
	// (0 before): the stream ends when it has sent that far.
	var endSeq, sent uint64 = 0, after
	finished := false
	checked := time.Now()
	for {
		if finished && sent >= endSeq {
			_ = sendStatus()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return nil
		case e, ok := <-entries.c:
			if !ok {
				return nil
			}
			// The key is checked again at most once a second here: a
			// long journal is sent in one go.
			if now := time.Now(); now.Sub(checked) >= time.Second {
				if s.keyRevoked(ctx, r) {
					return nil
				}
				checked = now
			}
			sent = e.seq
			if err := stepEvent(out, e.seq, e.data); err != nil {
				return nil
			}
		case e, ok := <-reports.Updates():
			if !ok {
				return nil
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut || finished {
				continue
			}
			// The end entry is journaled before the report is stored.
			lctx, lcancel := s.timeout(ctx)
			endSeq, err = lastJournalSeq(lctx, topo, tenant, id)
			lcancel()
			if err != nil {
				return nil
			}
			finished = true
		case e, ok := <-statuses.Updates():
			if !ok {
				return nil
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if err := sendStatus(); err != nil {
				return nil
			}
		case <-ping:
			if s.keyRevoked(ctx, r) {
				return nil
			}
			if _, err := out.Write([]byte(": ping\n\n")); err != nil {
				return nil
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
		}
	}
}

// resumeAfter is the journal sequence a step stream starts after:
// ?after=, else the Last-Event-ID header (a reconnecting EventSource),
// else 0 (from the first entry).
func resumeAfter(r *http.Request) (uint64, error) {
	v, name := r.URL.Query().Get("after"), "after"
	if v == "" {
		v, name = r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, problem(TypeBadRequest, "%s %q must be a journal sequence: a whole number >= 0", name, v)
	}
	return n, nil
}

// stepEvent writes journal entry data (at seq) as a step event.
func stepEvent(out *deadlineWriter, seq uint64, data []byte) error {
	var e schemas.JournalEntry
	if err := schemas.Decode(data, &e); err != nil {
		// An entry this build cannot read is left out, not fatal to the view.
		return nil
	}
	b, err := json.Marshal(dashboard.Summarize(seq, &e))
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "id: %d\n", seq); err != nil {
		return err
	}
	return event(out, "step", b)
}

// lastJournalSeq is the stream sequence of tenant/job's last journal
// entry, 0 if it has none.
func lastJournalSeq(ctx context.Context, topo *bus.Topology, tenant, job string) (uint64, error) {
	st, err := topo.JS.Stream(ctx, topo.NS.JournalStream())
	if err != nil {
		return 0, fmt.Errorf("%w: journal stream: %w", jobs.ErrUnavailable, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, topo.NS.JournalSubject(tenant, job))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: journal: %w", jobs.ErrUnavailable, err)
	}
	return m.Sequence, nil
}

// journalEntry is one raw journal entry and its stream sequence.
type journalEntry struct {
	seq  uint64
	data []byte
}

// journalFeed delivers a job's journal entries, in order, on c until stop.
type journalFeed struct {
	c    chan journalEntry
	it   jetstream.MessagesContext
	done chan struct{}
	stop func()
}

// followJournal follows tenant/job's journal with an ordered consumer from
// the entry after sequence after: the entries written so far, then each
// new one.
func (s *Server) followJournal(ctx context.Context, tenant, job string, after uint64) (*journalFeed, error) {
	topo := s.deps.Topo
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{topo.NS.JournalSubject(tenant, job)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cctx, cancel := s.timeout(ctx)
	cons, err := topo.JS.OrderedConsumer(cctx, topo.NS.JournalStream(), cfg)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%w: follow journal: %w", jobs.ErrUnavailable, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("%w: follow journal: %w", jobs.ErrUnavailable, err)
	}
	fctx, fcancel := context.WithCancel(ctx)
	f := &journalFeed{c: make(chan journalEntry, 64), it: it, done: make(chan struct{})}
	f.stop = func() {
		fcancel()
		it.Stop()
		<-f.done
	}
	go func() { // owned by f: ends when f.stop cancels fctx and stops it
		defer close(f.done)
		defer close(f.c)
		for {
			m, err := it.Next(jetstream.NextContext(fctx))
			if err != nil {
				return
			}
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			select {
			case f.c <- journalEntry{seq: md.Sequence.Stream, data: m.Data()}:
			case <-fctx.Done():
				return
			}
		}
	}()
	return f, nil
}
