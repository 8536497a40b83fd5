package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/lease"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// ErrBusy means another sweep holds the sweep's lease: it is doing the
// work already.
var ErrBusy = errors.New("retention: another sweep is running")

// ErrLeaseLost means a sweep could not renew its lease (another sweep
// took it, or NATS failed): it stopped where it was.
var ErrLeaseLost = errors.New("retention: the sweep's lease was lost, sweep stopped")

// renewEvery is how many items (jobs, batches, dead-letter subjects) a
// sweep handles at most between two renewals of its lease; it renews
// sooner once a third of the lease's TTL has passed.
const renewEvery = 200

// The sweep's lease, in the retention bucket.
const (
	leaseTenant = "sweep"
	leaseJob    = "lease"
)

// LeaseFloor is how long after a job ended its lease key is kept even
// when everything else of it goes: as long as the sample and result
// streams keep a message (their max age), so a job id used again after a
// purge still gets a fencing token above any stray message of the old run.
const LeaseFloor = 24 * time.Hour

// Config configures a Sweeper.
type Config struct {
	// Owner names the sweeper in its lease (required): a coordinator's id,
	// or the CLI's.
	Owner string
	// LeaseTTL is how long a sweep holds the lease at most. Default 5m.
	LeaseTTL time.Duration
	// Logger receives operational logs. Default slog.Default().
	Logger *slog.Logger
}

// Sweeper removes finished work past its retention.
type Sweeper struct {
	topo   *topology.Topology
	kv     jetstream.KeyValue
	leases *lease.Manager
	log    *slog.Logger

	renewEvery int                     // renewEvery, or a test's
	afterRead  func(tenant, id string) // test hook: a job's record was read
}

// New returns a Sweeper on topo, creating the retention bucket if missing.
func New(ctx context.Context, topo *topology.Topology, cfg Config) (*Sweeper, error) {
	if topo == nil || cfg.Owner == "" {
		return nil, fmt.Errorf("retention: a sweeper needs a topology and an owner")
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	kv, err := OpenBucket(ctx, topo)
	if err != nil {
		return nil, err
	}
	m, err := lease.NewManager(kv, cfg.Owner, cfg.LeaseTTL)
	if err != nil {
		return nil, err
	}
	return &Sweeper{topo: topo, kv: kv, leases: m, log: cfg.Logger, renewEvery: renewEvery}, nil
}

// Bucket is the retention bucket (the policies).
func (s *Sweeper) Bucket() jetstream.KeyValue { return s.kv }

// Options narrow a sweep.
type Options struct {
	// Before, when set, removes everything of the jobs and batches that
	// ended before it and the dead letters stored before it, whatever the
	// policy (`maker jobs purge --before`). Zero: the policy decides.
	Before time.Time
	// Tenant limits the sweep to one tenant's data; "" is every tenant's.
	Tenant string
	// DryRun removes nothing and takes no lease: the result lists what
	// would go.
	DryRun bool
}

// Counts are what a sweep removed (or, dry, would remove).
type Counts struct {
	Jobs            int64 `json:"jobs"`             // jobs something was removed of
	JournalMessages int64 `json:"journal_messages"` // journal entries and checkpoints
	Reports         int64 `json:"reports"`
	Statuses        int64 `json:"statuses"`
	Records         int64 `json:"records"` // registry records
	Leases          int64 `json:"leases"`
	DeadLetters     int64 `json:"dead_letters"`
	Batches         int64 `json:"batches"`     // batch records
	BatchLines      int64 `json:"batch_lines"` // batch input lines
}

// Item is one job's, batch's or dead-letter subject's removal.
type Item struct {
	Kind   string    `json:"kind"` // job, batch or dlq
	Tenant string    `json:"tenant"`
	ID     string    `json:"id"`                 // job or batch id; for dlq the job id
	Ended  time.Time `json:"ended,omitzero"`     // when the job or batch ended
	What   []string  `json:"what"`               // journal, report, status, record, lease, lines, dead_letters
	Msgs   int64     `json:"messages,omitempty"` // journal messages, lines or dead letters
}

// Result is a sweep's outcome.
type Result struct {
	Counts
	Items []Item `json:"items"`
}

// Sweep removes what the policy says is past its age at now.
func (s *Sweeper) Sweep(ctx context.Context, now time.Time) (Result, error) {
	return s.Run(ctx, now, Options{})
}

// Run sweeps as opts say. Unless dry, it holds the sweep's lease
// meanwhile, renewing it as it goes: ErrBusy when another sweep holds it,
// ErrLeaseLost (with what was removed so far) when a renewal fails. When
// the policy decides (opts.Before zero) and any policy record cannot be
// read, nothing is swept: falling back to the defaults would remove what
// an unreadable policy may keep.
func (s *Sweeper) Run(ctx context.Context, now time.Time, opts Options) (Result, error) {
	if opts.Tenant != "" {
		if err := schemas.ValidTenant(opts.Tenant); err != nil {
			return Result{}, err
		}
	}
	var held *lease.Lease
	if !opts.DryRun {
		l, err := s.leases.Acquire(ctx, leaseTenant, leaseJob)
		if errors.Is(err, lease.ErrHeld) {
			return Result{}, fmt.Errorf("%w: %w", ErrBusy, err)
		}
		if err != nil {
			return Result{}, err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := s.leases.Release(rctx, l, 0); err != nil {
				s.log.Warn("retention: release the sweep's lease", "err", err)
			}
		}()
		held = l
	}
	var pol Policy
	if opts.Before.IsZero() {
		var err error
		if pol, err = Load(ctx, s.kv); err != nil {
			return Result{}, fmt.Errorf("retention: policy unreadable, nothing swept: %w", err)
		}
	}
	sw := &sweep{s: s, now: now, opts: opts, pol: pol, lease: held, renewed: time.Now()}
	var errs []error
	for _, stage := range []func(context.Context) error{sw.batches, sw.jobs, sw.deadLetters} {
		err := stage(ctx)
		if errors.Is(err, ErrLeaseLost) {
			return sw.res, errors.Join(append(errs, err)...)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return sw.res, errors.Join(errs...)
}

// hold keeps the sweep's lease: it renews it every renewEvery items, or
// once a third of its TTL has passed since the last renewal, whichever
// comes first. A renewal that fails is ErrLeaseLost: the sweep stops,
// since another one may be running now.
func (w *sweep) hold(ctx context.Context) error {
	if w.lease == nil {
		return nil
	}
	w.items++
	if w.items < w.s.renewEvery && time.Since(w.renewed) < w.s.leases.TTL()/3 {
		return nil
	}
	if err := w.s.leases.Renew(ctx, w.lease); err != nil {
		return fmt.Errorf("%w: %w", ErrLeaseLost, err)
	}
	w.items, w.renewed = 0, time.Now()
	return nil
}

// sweep is one Run's state.
type sweep struct {
	s    *Sweeper
	now  time.Time
	opts Options
	pol  Policy
	res  Result
	open map[string][]string // unfinished batches' ids, by tenant

	lease   *lease.Lease // the sweep's lease; nil when dry
	renewed time.Time    // when the lease was last renewed
	items   int          // items handled since
}

// due reports whether something of tenant's job that ended at ended is
// past age.
func (w *sweep) due(ended time.Time, age time.Duration) bool {
	if !w.opts.Before.IsZero() {
		return !ended.IsZero() && ended.Before(w.opts.Before)
	}
	return Due(ended, w.now, age)
}

// batches removes finished batches past their age, and notes the
// unfinished ones: their jobs are not touched.
func (w *sweep) batches(ctx context.Context) error {
	w.open = map[string][]string{}
	topo := w.s.topo
	lister, err := topo.Batches.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil
		}
		return fmt.Errorf("retention: list batches: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	_ = lister.Stop()
	var errs []error
	for _, key := range keys {
		if strings.HasSuffix(key, "-lease") {
			continue
		}
		if err := w.hold(ctx); err != nil {
			return errors.Join(append(errs, err)...)
		}
		e, err := topo.Batches.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("retention: batch %s: %w", key, err))
			continue
		}
		// The key says whose batch it is (a tenant may write its own
		// records), never the body: a record naming another tenant or
		// batch than its key is no batch, removed as its key's tenant's
		// once the server's time of its last write is past that tenant's
		// age, with its key's own lines, never the lines it names.
		tenant, id, ok := bus.SplitJobKey(key)
		if !ok || schemas.ValidBatchID(id) != nil {
			continue
		}
		var b schemas.BatchRecord
		if schemas.Decode(e.Value(), &b) != nil {
			continue
		}
		own := b.Tenant == tenant && b.ID == id
		if own && b.State != schemas.BatchCompleted && b.State != schemas.BatchCancelled {
			w.open[tenant] = append(w.open[tenant], id)
			continue
		}
		if w.opts.Tenant != "" && tenant != w.opts.Tenant {
			continue
		}
		ended := b.UpdatedAt
		if b.CompletedAt != nil {
			ended = *b.CompletedAt
		}
		if !own {
			ended = e.Created()
		}
		if !w.due(ended, w.pol.For(tenant, "").Batches) {
			continue
		}
		it := Item{Kind: "batch", Tenant: tenant, ID: id, Ended: ended}
		lines := topo.NS.BatchSubject(tenant, id)
		n, err := w.purgeSubject(ctx, topo.NS.BatchesStream(), lines)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n > 0 {
			it.What, it.Msgs = append(it.What, "lines"), n
			w.res.BatchLines += n
		}
		if ok, err := w.purgeKey(ctx, topo.Batches, key+"-lease", 0); err != nil {
			errs = append(errs, err)
			continue
		} else if ok {
			it.What = append(it.What, "lease")
		}
		if ok, err := w.purgeKey(ctx, topo.Batches, key, e.Revision()); err != nil {
			errs = append(errs, err)
			continue
		} else if ok {
			it.What = append(it.What, "record")
			w.res.Batches++
		}
		w.res.Items = append(w.res.Items, it)
	}
	return errors.Join(errs...)
}

// inOpenBatch reports whether job (of batch, if it says) is a line of a
// batch of tenant still running (its jobs are <batch>-<line>): the
// batch's runner reads its jobs' reports.
func (w *sweep) inOpenBatch(tenant, job, batch string) bool {
	for _, id := range w.open[tenant] {
		if id == batch || strings.HasPrefix(job, id+"-") {
			return true
		}
	}
	return false
}

// jobs removes what finished jobs keep past its age. A job not finished
// is never touched.
func (w *sweep) jobs(ctx context.Context) error {
	topo := w.s.topo
	keys, err := jobs.Keys(ctx, topo, w.opts.Tenant)
	if err != nil {
		return err
	}
	var errs []error
	for _, key := range keys {
		if err := w.hold(ctx); err != nil {
			return errors.Join(append(errs, err)...)
		}
		tenant, id, _ := strings.Cut(key, ".")
		if err := w.job(ctx, tenant, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// job removes what tenant's job id keeps past its age. Right before each
// removal it reads the job's record again, and leaves the job alone when
// the record changed since the first read (the id was used again: its
// journal, status and lease are a new run's) or is gone (another sweep
// removed it).
func (w *sweep) job(ctx context.Context, tenant, id string) error {
	topo := w.s.topo
	rec, rev, err := jobs.Get(ctx, topo, tenant, id)
	if errors.Is(err, jobs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !rec.Finished || w.inOpenBatch(tenant, id, rec.Spec.BatchID) {
		return nil
	}
	if w.s.afterRead != nil {
		w.s.afterRead(tenant, id)
	}
	ended := rec.UpdatedAt
	ages := w.pol.For(tenant, id)
	key := bus.JobKey(tenant, id)
	it := Item{Kind: "job", Tenant: tenant, ID: id, Ended: ended}
	defer func() {
		if len(it.What) > 0 {
			w.res.Jobs++
			w.res.Items = append(w.res.Items, it)
		}
	}()
	if w.due(ended, ages.Journal) {
		if ok, err := w.same(ctx, tenant, id, rev); !ok || err != nil {
			return err
		}
		n, err := w.purgeSubject(ctx, topo.NS.JournalStream(), topo.NS.JournalSubject(tenant, id), topo.NS.CheckpointSubject(tenant, id))
		if err != nil {
			return err
		}
		if n > 0 {
			it.What, it.Msgs = append(it.What, "journal"), n
			w.res.JournalMessages += n
		}
	}
	for _, k := range []struct {
		age  time.Duration
		kv   jetstream.KeyValue
		name string
		n    *int64
	}{
		{ages.Reports, topo.Reports, "report", &w.res.Reports},
		{ages.Status, topo.Status, "status", &w.res.Statuses},
	} {
		if !w.due(ended, k.age) {
			continue
		}
		if ok, err := w.same(ctx, tenant, id, rev); !ok || err != nil {
			return err
		}
		ok, err := w.purgeKey(ctx, k.kv, key, 0)
		if err != nil {
			return err
		}
		if ok {
			it.What = append(it.What, k.name)
			*k.n++
		}
	}
	if !w.due(ended, ages.Registry) {
		return nil
	}
	if !ended.After(w.now.Add(-LeaseFloor)) {
		if ok, err := w.same(ctx, tenant, id, rev); !ok || err != nil {
			return err
		}
		ok, err := w.purgeKey(ctx, topo.Leases, key, 0)
		if err != nil {
			return err
		}
		if ok {
			it.What = append(it.What, "lease")
			w.res.Leases++
		}
	}
	// Last: while the record stays, the next sweep finds the rest.
	ok, err := w.purgeKey(ctx, topo.Jobs, key, rev)
	if err != nil {
		return err
	}
	if ok {
		it.What = append(it.What, "record")
		w.res.Records++
	}
	return nil
}

// same reports whether tenant's job id still has the finished record
// read at revision rev. A dry sweep removes nothing: it does not check.
func (w *sweep) same(ctx context.Context, tenant, id string, rev uint64) (bool, error) {
	if w.opts.DryRun {
		return true, nil
	}
	rec, cur, err := jobs.Get(ctx, w.s.topo, tenant, id)
	if errors.Is(err, jobs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return cur == rev && rec.Finished, nil
}

// purgeSubject removes (dry: counts) the messages of stream on subjects,
// and returns how many there were.
func (w *sweep) purgeSubject(ctx context.Context, stream string, subjects ...string) (int64, error) {
	st, err := w.s.topo.JS.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("retention: stream %s: %w", stream, err)
	}
	var total int64
	for _, subj := range subjects {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			return total, fmt.Errorf("retention: count %s: %w", subj, err)
		}
		n := int64(info.State.Subjects[subj])
		if n == 0 {
			continue
		}
		if !w.opts.DryRun {
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
				return total, fmt.Errorf("retention: purge %s: %w", subj, err)
			}
		}
		total += n
	}
	return total, nil
}

// purgeKey removes (dry: finds) key of kv, only at revision rev when rev
// is not 0, and reports whether there was one to remove. The key goes
// whole: a purge marker conditional on the revision read (a write in
// between wins), then the marker itself, so nothing of it stays behind.
func (w *sweep) purgeKey(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64) (bool, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("retention: read %s: %w", key, err)
	}
	if rev != 0 && e.Revision() != rev {
		return false, nil // changed since read: left for the next sweep
	}
	if w.opts.DryRun {
		return true, nil
	}
	subj := "$KV." + kv.Bucket() + "." + key
	msg := nats.NewMsg(subj)
	msg.Header.Set(kvOperation, kvPurge)
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	ack, err := w.s.topo.JS.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(e.Revision()))
	if isWrongLast(err) {
		return false, nil // another writer got in between
	}
	if err != nil {
		return false, fmt.Errorf("retention: remove %s: %w", key, err)
	}
	st, err := w.s.topo.JS.Stream(ctx, "KV_"+kv.Bucket())
	if err == nil {
		err = st.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(ack.Sequence+1))
	}
	if err != nil {
		w.s.log.Warn("retention: remove a purge marker; it stays", "key", key, "err", err)
	}
	return true, nil
}

// The KV headers of a purge (what jetstream.KeyValue.Purge writes).
const (
	kvOperation = "KV-Operation"
	kvPurge     = "PURGE"
)

func isWrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
