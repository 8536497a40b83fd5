package batch

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Create defaults and bounds.
const (
	DefaultWindow       = 32
	DefaultMaxLines     = 50_000
	MaxLinesLimit       = 1_000_000
	DefaultMaxLineBytes = 64 << 10
	// DefaultMaxOpen is how many batches a tenant may have open (not
	// completed or cancelled) at once.
	DefaultMaxOpen = 16
	// DefaultMaxOpenBytes is how many bytes of lines a tenant's open
	// batches may hold together in the batch stream, which every tenant
	// shares (topology.Limits.BatchesBytes, 4 GiB by default).
	DefaultMaxOpenBytes = 512 << 20
	// MaxLineBytesLimit keeps a stored line (its prepared job spec, a
	// little larger than the line) within a bus message.
	MaxLineBytesLimit = 512 << 10
)

// publishAhead bounds Create's line publishes awaiting the server's ack.
const publishAhead = 128

// CreateOptions configure a batch. Zero fields take the defaults.
type CreateOptions struct {
	// Priority of the batch's jobs whose line sets none, 0 to 9. Default 0.
	Priority int
	// Window is the most jobs of the batch unfinished at once, 1 to
	// schemas.MaxBatchWindow (the runner lowers it to the tenant's
	// max_running_jobs when that is set). Default DefaultWindow (32).
	Window int
	// MaxLines refuses a batch of more lines (blank lines not counted),
	// up to MaxLinesLimit. Default DefaultMaxLines (50,000).
	MaxLines int
	// MaxLineBytes is the longest line taken; a longer one is refused
	// with line_too_long (and the rest runs). Up to MaxLineBytesLimit.
	// Default DefaultMaxLineBytes (64 KiB).
	MaxLineBytes int
	// MaxOpen refuses the batch, with an error wrapping ErrTooMany,
	// when the tenant has this many batches open (queued, running or
	// cancelling) already: it bounds what a tenant keeps stored. It is
	// checked before the input is read and again before the batch is
	// kept, so only Creates of one tenant racing to their last step may
	// together pass it. Default DefaultMaxOpen (16).
	MaxOpen int
	// MaxOpenBytes refuses the batch, with an error wrapping ErrTooMany,
	// when its lines as stored and those of the tenant's open batches
	// would hold more bytes than this: no tenant fills the batch stream
	// every tenant shares. Checked as the lines are stored (the batch
	// stops at the first line over) and again before the batch is kept.
	// Default DefaultMaxOpenBytes (512 MiB).
	MaxOpenBytes int64
	// Webhook is a URL the batch's end is POSTed to (optional;
	// schemas.ValidWebhookURL; internal/webhook delivers it).
	Webhook string
	// Prices is the fleet's price table, and SpendPerDayUSD the tenant's
	// spend quota (0: none): a line whose job is under a limit (the quota,
	// or its own budget_usd) and asks a model the table does not price is
	// refused with invalid_spec (pricing.Check), and budgets are admitted
	// against the forecast at these prices. The zero Table prices nothing:
	// the coordinators still pause such a job before it runs anything.
	Prices         pricing.Table
	SpendPerDayUSD float64
	// Calibrations finds the stored calibration a line names
	// (calibrate.ForJob on the fleet's bucket): its job's task pinned as
	// ref, bound to params. Nil: a line naming one is refused with
	// invalid_spec (this submitter cannot read the fleet's calibrations).
	Calibrations func(ctx context.Context, ref task.Ref, params json.RawMessage, c schemas.CalibrationRef) (schemas.Calibration, error)
}

func (o *CreateOptions) defaults() error {
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.MaxLines == 0 {
		o.MaxLines = DefaultMaxLines
	}
	if o.MaxLineBytes == 0 {
		o.MaxLineBytes = DefaultMaxLineBytes
	}
	if o.MaxOpen == 0 {
		o.MaxOpen = DefaultMaxOpen
	}
	if o.MaxOpenBytes == 0 {
		o.MaxOpenBytes = DefaultMaxOpenBytes
	}
	switch {
	case o.Priority < schemas.MinPriority || o.Priority > schemas.MaxPriority:
		return fmt.Errorf("%w: priority must be between %d and %d, got %d", ErrInvalid, schemas.MinPriority, schemas.MaxPriority, o.Priority)
	case o.Window < 1 || o.Window > schemas.MaxBatchWindow:
		return fmt.Errorf("%w: window must be between 1 and %d, got %d", ErrInvalid, schemas.MaxBatchWindow, o.Window)
	case o.MaxLines < 1 || o.MaxLines > MaxLinesLimit:
		return fmt.Errorf("%w: max lines must be between 1 and %d, got %d", ErrInvalid, MaxLinesLimit, o.MaxLines)
	case o.MaxLineBytes < 1 || o.MaxLineBytes > MaxLineBytesLimit:
		return fmt.Errorf("%w: max line bytes must be between 1 and %d, got %d", ErrInvalid, MaxLineBytesLimit, o.MaxLineBytes)
	case o.MaxOpen < 1:
		return fmt.Errorf("%w: max open batches must be at least 1, got %d", ErrInvalid, o.MaxOpen)
	case o.MaxOpenBytes < 1:
		return fmt.Errorf("%w: max open bytes must be at least 1, got %d", ErrInvalid, o.MaxOpenBytes)
	}
	if o.Webhook != "" {
		if err := schemas.ValidWebhookURL(o.Webhook); err != nil {
			return fmt.Errorf("%w: webhook: %w", ErrInvalid, err)
		}
	}
	return nil
}

// NewBatchID returns a fresh batch id: batch_, time-ordered, then random.
func NewBatchID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "batch_" + strconv.FormatInt(time.Now().UnixMilli(), 36) + hex.EncodeToString(b[:])
}

// Create reads a batch of tenant from r, one job per JSONL line, and
// stores it (state queued; completed at once when no line is a job). Each
// line is checked as a job submit would check it, and nothing is
// enqueued: a coordinator's runner feeds the jobs later. A line that is
// not a job is kept with its error (see the error file) and the rest runs.
// The batch is refused as a whole, with an error wrapping ErrInvalid that
// names the lines, when it has no lines, more than MaxLines, a custom_id
// twice, or r fails (its error is wrapped too, e.g. an
// *http.MaxBytesError); nothing of a refused batch is kept or runs. A
// tenant with MaxOpen batches open already is refused with an error
// wrapping ErrTooMany, before its input is read; so is a batch whose
// lines would take the bytes its tenant's open batches hold over
// MaxOpenBytes, as soon as they would.
func (s *Store) Create(ctx context.Context, tenant string, r io.Reader, o CreateOptions) (schemas.BatchRecord, error) {
	if err := schemas.ValidTenant(tenant); err != nil {
		return schemas.BatchRecord{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := o.defaults(); err != nil {
		return schemas.BatchRecord{}, err
	}
	if s.tasks == nil {
		return schemas.BatchRecord{}, fmt.Errorf("%w: a store without tasks cannot create batches", ErrInvalid)
	}
	held, err := s.checkOpen(ctx, tenant, o)
	if err != nil {
		return schemas.BatchRecord{}, err
	}
	c := &creator{
		s: s, tenant: tenant, id: NewBatchID(), o: o, now: time.Now().UTC(), held: held,
		seen: map[uint64]uint64{}, seed: maphash.MakeSeed(), resolved: map[string]task.Ref{},
	}
	c.subject = s.topo.NS.BatchSubject(tenant, c.id)
	counts, err := c.read(ctx, r)
	if err == nil {
		err = c.flush(len(c.inflight))
	}
	if err != nil {
		c.purge()
		return schemas.BatchRecord{}, err
	}
	rec := schemas.BatchRecord{
		Header: schemas.NewHeader(schemas.KindBatchRecord), ID: c.id, Tenant: tenant, State: schemas.BatchQueued,
		Priority: o.Priority, Window: o.Window, Counts: counts, CreatedAt: c.now, UpdatedAt: c.now, StoredBytes: c.bytes,
		Webhook: o.Webhook,
	}
	rec.Counts.Failed = counts.Invalid
	if counts.Valid == 0 {
		rec.State, rec.Cursor, rec.CompletedAt = schemas.BatchCompleted, counts.Total, &c.now
	} else if held, err := s.checkOpen(ctx, tenant, o); err != nil { // others were kept meanwhile
		c.purge()
		return schemas.BatchRecord{}, err
	} else if err := c.checkBytes(held); err != nil {
		c.purge()
		return schemas.BatchRecord{}, err
	}
	if _, err := s.recs.Create(ctx, recordKey(tenant, c.id), &rec); err != nil {
		c.purge()
		return schemas.BatchRecord{}, fmt.Errorf("%w: store batch %s/%s: %w", ErrUnavailable, tenant, c.id, err)
	}
	s.ended(ctx, rec) // no valid line: it ended at once
	return rec, nil
}

// checkOpen refuses a new batch of tenant when it has o.MaxOpen batches
// open, or their lines hold o.MaxOpenBytes; else it returns the bytes
// they hold.
func (s *Store) checkOpen(ctx context.Context, tenant string, o CreateOptions) (held int64, err error) {
	recs, err := s.List(ctx, tenant)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, rec := range recs {
		if !schemas.BatchTerminal(rec.State) {
			n++
			held += rec.StoredBytes
		}
	}
	if n >= o.MaxOpen {
		return 0, fmt.Errorf("%w: tenant %s has %d batches open, at most %d; wait for one to end or cancel one", ErrTooMany, tenant, n, o.MaxOpen)
	}
	if held >= o.MaxOpenBytes {
		return 0, openBytesErr(tenant, held, o.MaxOpenBytes)
	}
	return held, nil
}

func openBytesErr(tenant string, n, limit int64) error {
	return fmt.Errorf("%w: tenant %s's open batches would hold %d bytes of lines, at most %d; wait for one to end or cancel one",
		ErrTooMany, tenant, n, limit)
}

// checkBytes refuses the batch once its lines and those of the tenant's
// other open batches (held) hold more than MaxOpenBytes.
func (c *creator) checkBytes(held int64) error {
	if held+c.bytes > c.o.MaxOpenBytes {
		return openBytesErr(c.tenant, held+c.bytes, c.o.MaxOpenBytes)
	}
	return nil
}

// creator is one Create's state: what bounds its memory is the line
// buffer, the publishes in flight and the custom_id hashes.
type creator struct {
	s       *Store
	tenant  string
	id      string
	subject string
	o       CreateOptions
	now     time.Time

	seed     maphash.Seed
	seen     map[uint64]uint64 // custom_id hash → stream sequence of its line
	resolved map[string]task.Ref
	inflight []pending
	// held is what the tenant's other open batches held when Create
	// began; bytes what this batch's stored lines hold.
	held, bytes int64
}

type pending struct {
	line  int64
	hash  uint64 // of its custom_id, if hasID
	hasID bool
	ack   jetstream.PubAckFuture
}

// maxResolved bounds the tasks a Create remembers having resolved.
const maxResolved = 64

// read reads, checks and stores every line of r, returning the counts.
func (c *creator) read(ctx context.Context, r io.Reader) (schemas.BatchCounts, error) {
	var counts schemas.BatchCounts
	br := bufio.NewReaderSize(r, 64<<10)
	buf := make([]byte, 0, 4096)
	for n := int64(1); ; n++ {
		if err := ctx.Err(); err != nil {
			return counts, err
		}
		line, tooLong, rerr := readLine(br, buf[:0], c.o.MaxLineBytes)
		buf = line[:0]
		if rerr != nil && rerr != io.EOF {
			if ctx.Err() != nil {
				return counts, ctx.Err()
			}
			return counts, fmt.Errorf("%w: reading line %d: %w", ErrInvalid, n, rerr)
		}
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // a byte order mark
		}
		if tooLong || len(bytes.TrimSpace(line)) > 0 {
			if counts.Total == int64(c.o.MaxLines) {
				return counts, fmt.Errorf("%w: line %d: more than %d lines", ErrInvalid, n, c.o.MaxLines)
			}
			counts.Total++
			it, err := c.item(ctx, n, line, tooLong)
			if err != nil {
				return counts, err
			}
			data, it, err := c.encode(it)
			if err != nil {
				return counts, err
			}
			if it.Error != nil {
				counts.Invalid++
			} else {
				counts.Valid++
			}
			if err := c.store(it, data); err != nil {
				return counts, err
			}
		}
		if rerr == io.EOF {
			break
		}
	}
	if counts.Total == 0 {
		return counts, fmt.Errorf("%w: no lines", ErrInvalid)
	}
	return counts, nil
}

// readLine reads one line into buf (without its line break), keeping at
// most max bytes: tooLong says the rest was skipped. err is io.EOF after
// the last line.
func readLine(br *bufio.Reader, buf []byte, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		chunk = bytes.TrimSuffix(chunk, []byte("\n"))
		if len(buf)+len(chunk) > max+1 { // +1: a '\r' before the '\n'
			tooLong = true
		} else if !tooLong {
			buf = append(buf, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		buf = bytes.TrimSuffix(buf, []byte("\r"))
		if len(buf) > max {
			tooLong = true
		}
		if tooLong {
			buf = buf[:0]
		}
		return buf, tooLong, err
	}
}

// item checks line n. A duplicate custom_id refuses the batch (an error
// naming both lines); every other problem is the line's own error.
func (c *creator) item(ctx context.Context, n int64, line []byte, tooLong bool) (schemas.BatchItem, error) {
	it := schemas.BatchItem{Header: schemas.NewHeader(schemas.KindBatchItem), Tenant: c.tenant, BatchID: c.id, Line: n}
	fail := func(code, format string, args ...any) (schemas.BatchItem, error) {
		it.Error = &schemas.BatchError{Code: code, Message: message(fmt.Sprintf(format, args...))}
		return it, nil
	}
	if tooLong {
		return fail(schemas.BatchErrLineTooLong, "line is longer than %d bytes", c.o.MaxLineBytes)
	}
	l, err := schemas.DecodeBatchLine(line)
	if err != nil {
		if !utf8.Valid(line) || !json.Valid(line) {
			return fail(schemas.BatchErrInvalidJSON, "%s", trimInvalid(err))
		}
		return fail(schemas.BatchErrInvalidLine, "%s", trimInvalid(err))
	}
	if err := schemas.CheckCustomID(l.CustomID); err != nil {
		return fail(schemas.BatchErrInvalidCustomID, "%s", trimInvalid(err))
	}
	it.CustomID = l.CustomID
	if err := c.unique(ctx, n, l.CustomID); err != nil {
		return it, err
	}
	if l.Tenant != "" && l.Tenant != c.tenant {
		return fail(schemas.BatchErrWrongTenant, "the line names tenant %q; a batch's jobs are its tenant's", l.Tenant)
	}
	spec := l.Spec(c.tenant, c.o.Priority)
	spec.JobID, spec.BatchID, spec.BatchLine, spec.SubmittedAt = schemas.BatchJobID(c.id, n), c.id, n, c.now
	name, version, err := jobs.SplitTask(l.Task, l.TaskVersion)
	if err != nil {
		return fail(schemas.BatchErrUnknownTask, "%s", trimInvalid(err))
	}
	spec.Task = name
	ref, err := c.resolve(ctx, name, version)
	if err != nil {
		return fail(schemas.BatchErrUnknownTask, "%s", trimInvalid(err))
	}
	spec.TaskVersion, spec.TaskHash = ref.Version, ref.Hash
	if l.Calibration != nil {
		msg, err := c.calibrate(ctx, &l, ref, &spec)
		if err != nil {
			return it, err
		}
		if msg != "" {
			return fail(schemas.BatchErrInvalidSpec, "%s", msg)
		}
	}
	spec.ApplyDefaults()
	// A line that names no k has it planned by PrepareAdmitted, once its
	// params are known to bind: every other field is checked here first.
	probe := spec
	if probe.K == 0 {
		probe.K = 1
	}
	if err := probe.Validate(); err != nil {
		return fail(schemas.BatchErrInvalidSpec, "%s", trimInvalid(err))
	}
	if err := jobs.PrepareAdmitted(ctx, &spec, c.s.tasks, c.o.Prices); err != nil {
		if ctx.Err() != nil {
			return it, ctx.Err()
		}
		return fail(schemas.BatchErrInvalidParams, "%s", trimInvalid(err))
	}
	if err := pricing.Check(c.o.Prices, &spec, c.o.SpendPerDayUSD); err != nil {
		return fail(schemas.BatchErrInvalidSpec, "%s", err)
	}
	it.Spec = &spec
	return it, nil
}

// calibrate gives spec what the calibration line names measured
// (schemas.Calibration.ApplyTo); msg says why the line is refused, err
// why the batch cannot go on (the calibrations unreadable, ctx ended).
func (c *creator) calibrate(ctx context.Context, l *schemas.BatchLine, ref task.Ref, spec *schemas.JobSpec) (msg string, err error) {
	switch {
	case l.PEstimate != 0 || l.ValidFraction != 0:
		return "give p_estimate and valid_fraction, or a calibration to take them from, not both", nil
	case c.o.Calibrations == nil:
		return "this submitter cannot read the fleet's calibrations: give p_estimate", nil
	}
	if err := l.Calibration.Check(); err != nil {
		return trimInvalid(err), nil
	}
	cal, err := c.o.Calibrations(ctx, ref, spec.Params, *l.Calibration)
	switch {
	case ctx.Err() != nil:
		return "", ctx.Err()
	case errors.Is(err, jobs.ErrUnavailable):
		return "", err
	case err != nil:
		return trimInvalid(err), nil
	}
	cal.ApplyTo(spec)
	return "", nil
}

// resolve pins a task, remembering the first few it resolved.
func (c *creator) resolve(ctx context.Context, name, version string) (task.Ref, error) {
	key := name + "@" + version
	if ref, ok := c.resolved[key]; ok {
		return ref, nil
	}
	ref, err := c.s.tasks.Resolve(ctx, name, version)
	if err == nil && len(c.resolved) < maxResolved {
		c.resolved[key] = ref
	}
	return ref, err
}

// unique refuses custom_id on line n if an earlier line has it. Lines
// are remembered by an 8-byte hash and their stream sequence; a hash match
// is confirmed against the stored line.
func (c *creator) unique(ctx context.Context, n int64, id string) error {
	h := maphash.String(c.seed, id)
	if _, ok := c.seen[h]; !ok {
		c.seen[h] = 0 // the sequence is filled in when the line is stored
		return nil
	}
	if err := c.flush(len(c.inflight)); err != nil { // the earlier line's sequence
		return err
	}
	seq := c.seen[h]
	// Read back through an ordered consumer on the batch's own subject,
	// not by sequence: a tenant's NATS identity may read only its own
	// subjects, and a get by sequence cannot be scoped to them.
	var first schemas.BatchItem
	found := false
	err := bus.ReadOrdered(ctx, c.s.topo.JS, bus.ReadRange{
		Stream: c.s.topo.NS.BatchesStream(), Subjects: []string{c.subject}, From: seq, To: seq,
	}, func(_ uint64, data []byte) error {
		found = true
		return schemas.Decode(data, &first)
	})
	if err != nil || !found {
		return fmt.Errorf("%w: read line back: %v", ErrUnavailable, cmp.Or(err, errors.New("not stored")))
	}
	if first.CustomID != id {
		return nil // two custom_ids with one hash: both stay unique
	}
	return fmt.Errorf("%w: line %d: duplicate custom_id %q (first on line %d)", ErrInvalid, n, id, first.Line)
}

// encode encodes it; a line whose job is too large for a bus message
// (its params, escaped) becomes the line's error instead.
func (c *creator) encode(it schemas.BatchItem) ([]byte, schemas.BatchItem, error) {
	data, err := schemas.Encode(&it)
	if err != nil {
		return nil, it, fmt.Errorf("%w: line %d: %w", ErrInvalid, it.Line, err)
	}
	if limit := int(c.s.topo.Config.MaxMsgSize) - 1024; limit > 0 && len(data) > limit && it.Spec != nil {
		it.Spec = nil
		it.Error = &schemas.BatchError{Code: schemas.BatchErrLineTooLong, Message: fmt.Sprintf("the line's job is %d bytes, over %d", len(data), limit)}
		return c.encode(it)
	}
	return data, it, nil
}

// store publishes a line on the batch's subject, keeping at most
// publishAhead publishes unacknowledged.
func (c *creator) store(it schemas.BatchItem, data []byte) error {
	c.bytes += int64(len(data))
	if err := c.checkBytes(c.held); err != nil {
		return err
	}
	msg := &nats.Msg{Subject: c.subject, Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, c.tenant+"/"+c.id+"/"+strconv.FormatInt(it.Line, 10))
	ack, err := c.s.topo.JS.PublishMsgAsync(msg)
	if err != nil {
		return fmt.Errorf("%w: store line %d: %w", ErrUnavailable, it.Line, err)
	}
	p := pending{line: it.Line, ack: ack}
	if it.CustomID != "" {
		p.hash, p.hasID = maphash.String(c.seed, it.CustomID), true
	}
	c.inflight = append(c.inflight, p)
	if len(c.inflight) >= publishAhead {
		return c.flush(publishAhead / 2)
	}
	return nil
}

// flush waits for the n oldest publishes' acks, recording the sequence of
// each custom_id's line.
func (c *creator) flush(n int) error {
	for _, p := range c.inflight[:n] {
		select {
		case ack := <-p.ack.Ok():
			if p.hasID && c.seen[p.hash] == 0 {
				c.seen[p.hash] = ack.Sequence
			}
		case err := <-p.ack.Err():
			if bus.LimitReached(err) {
				return fmt.Errorf("%w: store line %d: %w", ErrFull, p.line, err)
			}
			return fmt.Errorf("%w: store line %d: %w", ErrUnavailable, p.line, err)
		}
	}
	c.inflight = append(c.inflight[:0], c.inflight[n:]...)
	return nil
}

// purge removes what Create stored of a refused batch.
func (c *creator) purge() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range c.inflight { // let the publishes land first
		select {
		case <-p.ack.Ok():
		case <-p.ack.Err():
		case <-ctx.Done():
		}
	}
	c.inflight = nil
	if st, err := c.s.topo.JS.Stream(ctx, c.s.topo.NS.BatchesStream()); err == nil {
		_ = st.Purge(ctx, jetstream.WithPurgeSubject(c.subject))
	}
}

// message bounds an error message for a line.
func message(m string) string {
	if len(m) > schemas.MaxBatchErrorBytes {
		m = strings.ToValidUTF8(m[:schemas.MaxBatchErrorBytes-3], "") + "..."
	}
	if m == "" {
		m = "invalid"
	}
	return m
}

// trimInvalid drops the sentinels' prefixes from err's message.
func trimInvalid(err error) string {
	m := err.Error()
	for _, p := range []string{jobs.ErrInvalid.Error() + ": ", schemas.ErrInvalid.Error() + ": "} {
		m = strings.ReplaceAll(m, p, "")
	}
	return m
}
