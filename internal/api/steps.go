package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/dashboard"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// jobSteps is GET /v1/jobs/{id}/steps: Server-Sent Events for the
// dashboard. "step" (id: the journal sequence; data: a step_summary of
// each journal entry, schemas.StepSummary): after ?after= / Last-Event-ID
// when given, else about the ?tail= most recent entries (default
// DefaultStepTail; 0: from the first entry), then each new one as it is
// written; "status" (a job_status) now and on every change. Once the job
// has its report and every entry up to its end has been sent, a last
// status goes out and the stream ends. ": ping" every Heartbeat.
//
// The stream shares the event streams' limits (MaxStreamsPerKey,
// MaxStreams), ends when its key is revoked or its job purged, and cuts
// off a client that reads nothing for StreamWriteTimeout.
func (s *Server) jobSteps(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	after, err := resumeAfter(r)
	if err != nil {
		return err
	}
	tail, err := stepTail(r)
	if err != nil {
		return err
	}
	js, err := s.openJobStream(w, r, p)
	if err != nil {
		return err
	}
	defer js.close()
	ctx, stopGuard := s.guardJournal(js.ctx)
	defer stopGuard()
	topo, tenant, id := s.deps.Topo, js.tenant, js.id
	if after == 0 && tail > 0 {
		lctx, lcancel := s.timeout(ctx)
		after, err = tailStart(lctx, topo, tenant, id, tail)
		lcancel()
		if err != nil {
			return journalErr(ctx, err)
		}
	}
	entries, err := s.followJournal(ctx, tenant, id, after)
	if err != nil {
		return journalErr(ctx, err)
	}
	defer entries.stop()

	js.begin()
	if err := js.sendStatus(); err != nil {
		return nil // the stream has begun: it just ends
	}
	// endSeq is the journal's last sequence once the job has its report
	// (0 before): the stream ends when it has sent that far.
	var endSeq, sent uint64 = 0, after
	finished := false
	checked := time.Now()
	for {
		if finished && sent >= endSeq {
			_ = js.sendStatus()
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
			if err := stepEvent(js.out, e.seq, e.data); err != nil {
				return nil
			}
		case e, ok := <-js.reports.Updates():
			if !ok {
				return nil
			}
			if e == nil || finished {
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				if js.purged() {
					return nil
				}
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
		case e, ok := <-js.statuses.Updates():
			if !js.onStatus(e, ok) {
				return nil
			}
		case <-js.ping:
			if !js.heartbeat() {
				return nil
			}
		}
	}
}

// errJournalDenied: the NATS server refused this server's identity a read
// of the journal (an auth.conf that does not grant the api identity its
// filtered reads of the journal): the step stream is answered 503 at once
// instead of waiting for its timeout.
var errJournalDenied = errors.New("the NATS server refused this server's identity a read of the journal")

// guardJournal returns ctx, ended (with errJournalDenied, wrapping the
// violation, as its cause) as soon as the NATS server reports a refused
// request of this server's connection on the journal stream; stop ends
// the watch. nats.go reports a refused publish apart from the request
// that sent it, which would otherwise wait for its timeout.
func (s *Server) guardJournal(ctx context.Context) (context.Context, func()) {
	gctx, cancel := context.WithCancelCause(ctx)
	stream := s.deps.Topo.NS.JournalStream()
	stop := bus.WatchViolations(s.deps.NC, func(subject string, err error) {
		if slices.Contains(strings.Split(subject, "."), stream) {
			cancel(fmt.Errorf("%w: %w", errJournalDenied, err))
		}
	})
	return gctx, func() {
		stop()
		cancel(nil)
	}
}

// journalErr is err, a failed read of the journal under guardJournal's
// ctx, or the server's refusal when that is why it failed.
func journalErr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, errJournalDenied) {
		return cause
	}
	return err
}

// DefaultStepTail is how many of a job's most recent journal entries a
// step stream sends first when the client gives neither ?tail= nor a
// sequence to resume after; MaxStepTail is the most ?tail= may ask.
const (
	DefaultStepTail = 5000
	MaxStepTail     = 100_000
)

// resumeAfter is the journal sequence a step stream starts after:
// ?after=, else the Last-Event-ID header (a reconnecting EventSource),
// else 0 (none given). A journal sequence is below 2^63.
func resumeAfter(r *http.Request) (uint64, error) {
	v, name := r.URL.Query().Get("after"), "after"
	if v == "" {
		v, name = r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n >= 1<<63 {
		return 0, problem(TypeBadRequest, "%s %q must be a journal sequence: a whole number from 0 to 2^63-1", name, v)
	}
	return n, nil
}

// stepTail is ?tail=: how many of the most recent entries to send first
// (0: all of them), DefaultStepTail when not given.
func stepTail(r *http.Request) (uint64, error) {
	v := r.URL.Query().Get("tail")
	if v == "" {
		return DefaultStepTail, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > MaxStepTail {
		return 0, problem(TypeBadRequest, "tail %q must be a whole number from 0 (the whole journal) to %d", v, MaxStepTail)
	}
	return n, nil
}

// tailStart is the journal sequence to start after so that about the
// last n entries of tenant/job's journal come first (0: from the first).
// The job's entries share the journal stream with other jobs': the start
// is placed by their density between the job's first and last entry,
// exact when nothing else was written in between.
func tailStart(ctx context.Context, topo *topology.Topology, tenant, job string, n uint64) (uint64, error) {
	last, err := lastJournalSeq(ctx, topo, tenant, job)
	if err != nil || last == 0 {
		return 0, err
	}
	st, err := topo.JS.Stream(ctx, topo.NS.JournalStream())
	if err != nil {
		return 0, fmt.Errorf("%w: journal stream: %w", jobs.ErrUnavailable, err)
	}
	subj := topo.NS.JournalSubject(tenant, job)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, fmt.Errorf("%w: journal: %w", jobs.ErrUnavailable, err)
	}
	count := info.State.Subjects[subj]
	if count <= n {
		return 0, nil
	}
	first, err := bus.SubjectSeq(ctx, topo.JS, topo.NS.JournalStream(), subj, false)
	if err != nil || first == 0 {
		return 0, fmt.Errorf("%w: journal: first entry of %s/%s: %w", jobs.ErrUnavailable, tenant, job, err)
	}
	span := last - first + 1 // >= count > n
	// back is the span of n entries at the job's density: span*n/count,
	// below span as n < count.
	hi, lo := bits.Mul64(span, n)
	back, _ := bits.Div64(hi, lo, count)
	if back >= span {
		return first - 1, nil
	}
	return last - back, nil
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
// The journal is read only through consumers filtered on the job's
// decisions (bus.SubjectSeq, followJournal): what the api identity may
// read of it on a secured fleet (internal/auth), where a message get
// would read any job's entries and checkpoints.
func lastJournalSeq(ctx context.Context, topo *topology.Topology, tenant, job string) (uint64, error) {
	seq, err := bus.SubjectSeq(ctx, topo.JS, topo.NS.JournalStream(), topo.NS.JournalSubject(tenant, job), true)
	if err != nil {
		return 0, fmt.Errorf("%w: journal: %w", jobs.ErrUnavailable, err)
	}
	return seq, nil
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
