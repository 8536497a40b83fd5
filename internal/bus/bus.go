// Package bus is the fleet's NATS JetStream plumbing: subject names, the
// streams, consumers and key-value buckets every role shares, connecting,
// and the three loops every role would otherwise write for itself:
//
//   - Worker, the one consume loop of a durable pull consumer (slots
//     reserved before fetching, keep-alive, two-stage stop, a handler's
//     error deciding its message's fate), run by the voter, the judge and
//     the coordinator's job intake;
//   - KV, a typed view of a bucket with the one compare-and-set loop
//     (Update) and conflict test, used by the job registry, the leases and
//     the judge's sessions and approvals;
//   - ReadOrdered, the one reader of a stream range in order, used by the
//     journal, the dead-letter listing and the judge's audit trail.
//
// Topology of the default namespace "maker" (every subject carries the
// tenant, so tenants never share one; another Namespace renames every
// stream, bucket and subject, so fleets on one server share nothing):
//
//	stream MAKER_JOBS     maker.v1.job.<tenant>            job specs; work queue;
//	                                                       durable "coordinators" shared by all coordinators
//	stream MAKER_SAMPLES  maker.v1.sample.<tenant>.<job>   sample requests; work queue;
//	                                                       durable "voters" shared by all voters
//	stream MAKER_RESULTS  maker.v1.result.<tenant>.<job>.<gen>
//	                                                       sample results; work queue; one durable per
//	                                                       job and lease generation, read by its owner
//	stream MAKER_JOURNAL  maker.v1.journal.<tenant>.<job>.d  decisions and takeovers, appended with an
//	                                                       expected last subject sequence (fencing)
//	                      maker.v1.journal.<tenant>.<job>.c  checkpoints (the resume cursor)
//	stream MAKER_DLQ      maker.v1.dlq.<tenant>.<job>      dead letters; limits retention
//	core subject          maker.v1.decided.<tenant>.<job>  step-decided events (voters skip/cancel)
//	core request/reply    maker.v1.control.<tenant>.<job>  pause, resume, cancel (control.go);
//	                                                       served by the coordinators, queue group "coordinators"
//	core request/reply    maker.v1.decide.<tenant>.<job>   a person's answer for a step (control.go); same
//	KV maker_jobs         <tenant>.<job>                   job registry: spec, control, finished
//	KV maker_leases       <tenant>.<job>                   which coordinator owns a job, until when
//	KV maker_tasks        <name>.<version>                 registered task specs (immutable)
//	KV maker_status       <tenant>.<job>                   job progress, a few updates a second
//	KV maker_reports      <tenant>.<job>                   final job reports
//	KV maker_prices       <model> (bus.SafeKey), _default  the fleet's price table (operator only)
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/schemas"
)

// ErrTopology: an existing stream does not fit what this release needs.
var ErrTopology = errors.New("bus: existing topology does not fit")

// Names of the shared durable consumers (one per stream, so not
// namespaced).
const (
	ConsumerVoters       = "voters"
	ConsumerCoordinators = "coordinators"
)

// Config sets the topology's durability and timing. Zero fields take the
// documented defaults.
type Config struct {
	// Namespace of the fleet; "" is DefaultNamespace.
	Namespace Namespace
	// Storage of every stream: jetstream.FileStorage (default) or
	// jetstream.MemoryStorage.
	Storage jetstream.StorageType
	// WorkStorage is the storage of the two work queues, sample requests
	// and results, when Storage is file: jetstream.FileStorage (default)
	// or jetstream.MemoryStorage. They hold only work in flight, which a
	// job draws again when it is lost (a sample that times out is
	// re-sampled), so memory loses no decision: the journal, registry and
	// leases stay in Storage. A file-stored work queue that empties
	// removes its last block file and creates another (nats-server's
	// filestore), about once per step of a lone job; in memory nothing of
	// that happens. Memory suits a fleet whose nats-server lives and dies
	// with it (maker run, maker bench); a standalone server restarted
	// loses memory streams altogether, so fleets keep the default.
	WorkStorage jetstream.StorageType
	// WorkDuplicates is the duplicate window (Nats-Msg-Id) of the sample
	// and result work queues, and JournalDuplicates the journal's. Default
	// 2 minutes and 10 minutes. The server remembers every id of the
	// window: its memory grows with the message rate times the window
	// (about 100 bytes an id), up to a plateau. A window needs only to
	// outlast its publishers' retries: a voter retries a result for 10s,
	// the journal an append for under a minute (and its appends are fenced
	// besides), a coordinator never publishes a sample request twice.
	WorkDuplicates    time.Duration
	JournalDuplicates time.Duration
	// Replicas of every stream in a clustered server. Default 1.
	Replicas int
	// SampleAckWait is how long a voter may hold a sample request without
	// acking or signalling progress before it is redelivered. Default 30s.
	SampleAckWait time.Duration
	// SampleMaxDeliver bounds deliveries of one sample request. Default 10.
	SampleMaxDeliver int
	// JobAckWait is how long a coordinator may hold a job without
	// signalling progress before another takes it. Default 60s.
	JobAckWait time.Duration
	// MaxMsgSize bounds every message. Default 1 MiB.
	MaxMsgSize int32
	// Limits bound the streams that take messages from outside the
	// coordinators. Zero fields take the documented defaults.
	Limits Limits
	// StartupWait bounds how long Ensure keeps retrying while the server
	// does not answer (starting, restarting, overloaded). Default 60s.
	StartupWait time.Duration
	// Await has Ensure create nothing: while the namespace's topology is
	// missing (or any part of it) it waits, logging "waiting for the fleet
	// topology" and backing off up to 5s, until a coordinator or `maker
	// topology create` has made it, then binds it; ctx ends the wait. For
	// roles that must not decide the topology's replicas and limits by
	// starting first: voters (the CLI sets it). Default false: create
	// what is missing.
	Await bool
	// Logger receives Ensure's notices: waiting for the topology, replicas
	// raised. Default slog.Default().
	Logger *slog.Logger
}

// Limits bound the streams that take messages from outside the
// coordinators (tenants' jobs and batch lines, which maker serve stores
// for them; voters' results and dead letters), so that no one fills the
// server's store, which every stream shares, or crowds out another
// tenant's work. The server enforces them. A zero field takes its
// default; -1 lifts the limit. Ensure sets them on the streams it
// creates, and on existing streams that have none (an older release's);
// it never changes a limit an operator set.
type Limits struct {
	// QueuedJobsPerTenant bounds one tenant's jobs waiting in the jobs
	// stream for a coordinator to take them in: the server refuses the
	// next ("maximum messages per subject exceeded"). Default 10000.
	QueuedJobsPerTenant int64
	// DeadLettersPerJob bounds the dead letters kept for one job; the
	// oldest go. Default 1000.
	DeadLettersPerJob int64
	// JobsBytes, ResultsBytes, DLQBytes and BatchesBytes bound the jobs,
	// results, dead-letter and batch-lines streams. Full, the jobs and
	// batch-lines streams refuse new messages; the results and dead-letter
	// streams drop their oldest (a result lost is sampled again). Defaults
	// 1 GiB, 1 GiB, 512 MiB and 4 GiB; a stream kept in memory takes at
	// most MemoryStreamBytes.
	JobsBytes, ResultsBytes, DLQBytes, BatchesBytes int64
}

// MemoryStreamBytes caps a memory stream's default size limit: a server
// reserves a stream's limit from its memory when the stream is created.
const MemoryStreamBytes = 256 << 20

func (l *Limits) defaults() {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.QueuedJobsPerTenant, 10_000)
	def(&l.DeadLettersPerJob, 1000)
	def(&l.JobsBytes, 1<<30)
	def(&l.ResultsBytes, 1<<30)
	def(&l.DLQBytes, 512<<20)
	def(&l.BatchesBytes, 4<<30)
}

// bytesFor is a byte limit for a stream of storage st.
func bytesFor(limit int64, st jetstream.StorageType) int64 {
	if st == jetstream.MemoryStorage && (limit < 0 || limit > MemoryStreamBytes) {
		return MemoryStreamBytes
	}
	return limit
}

// workStorage is the storage of the sample and result work queues.
func (c *Config) workStorage() jetstream.StorageType {
	if c.Storage == jetstream.MemoryStorage {
		return jetstream.MemoryStorage
	}
	return c.WorkStorage
}

func (c *Config) defaults() {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.SampleAckWait == 0 {
		c.SampleAckWait = 30 * time.Second
	}
	if c.WorkDuplicates == 0 {
		c.WorkDuplicates = 2 * time.Minute
	}
	if c.JournalDuplicates == 0 {
		c.JournalDuplicates = 10 * time.Minute
	}
	if c.SampleMaxDeliver == 0 {
		c.SampleMaxDeliver = 10
	}
	if c.JobAckWait == 0 {
		c.JobAckWait = 60 * time.Second
	}
	if c.MaxMsgSize == 0 {
		c.MaxMsgSize = 1 << 20
	}
	c.Limits.defaults()
	if c.StartupWait == 0 {
		c.StartupWait = 60 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Topology holds handles on the shared streams and buckets.
type Topology struct {
	NS      Namespace
	JS      jetstream.JetStream
	Config  Config
	Status  jetstream.KeyValue
	Reports jetstream.KeyValue
	Jobs    jetstream.KeyValue
	Leases  jetstream.KeyValue
	// Tasks is the task registry: registered task specs (schemas.TaskRecord)
	// under <name>.<version>.
	Tasks jetstream.KeyValue
	// Quotas holds schemas.TenantQuota by tenant (and the fleet's under
	// schemas.FleetQuotaKey); APIKeys the API keys by their hash; Batches
	// the batch records by <tenant>.<batch>.
	Quotas  jetstream.KeyValue
	APIKeys jetstream.KeyValue
	Batches jetstream.KeyValue
	// Prices is the fleet's price table: schemas.ModelPrice by model
	// (internal/pricing).
	Prices jetstream.KeyValue
}

// Ensure creates the streams, shared consumers and buckets that are missing.
// The topology is created once, by its owners: coordinators (with their
// --replicas) and `maker topology create`, and the embedded fleets of
// `maker run` and the tests; roles that must not shape it (voters) set
// cfg.Await and wait for it instead, and client commands bind it (Open).
// Existing streams and buckets keep their settings, so roles started with
// different settings never fight over them, with one exception that only
// goes up: one with fewer replicas than cfg.Replicas (made by an older
// release, or by a client before the first coordinator) is raised to
// cfg.Replicas. While the server does not answer (a timeout, no
// responders) it retries with backoff for up to cfg.StartupWait, so a role
// started alongside a busy or restarting server waits instead of exiting.
// A server older than MinServerVersion is refused (ErrServerVersion).
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) (*Topology, error) {
	cfg.defaults()
	if err := cfg.Namespace.Validate(); err != nil {
		return nil, err
	}
	if cfg.Replicas < 1 || cfg.SampleMaxDeliver < 1 || cfg.SampleAckWait < time.Second || cfg.JobAckWait < time.Second || cfg.StartupWait < 0 {
		return nil, fmt.Errorf("bus: invalid config %+v", cfg)
	}
	if cfg.Await {
		return Await(ctx, js, cfg)
	}
	return retryTransient(ctx, cfg.StartupWait, func(actx context.Context) (*Topology, error) {
		if err := checkServer(js); err != nil {
			return nil, err
		}
		return ensureOnce(actx, js, cfg)
	})
}

// ensureAttemptTimeout bounds one pass of Ensure's requests.
const ensureAttemptTimeout = 10 * time.Second

// Transient reports whether err means the server did not answer in time
// or not at all (yet), so the same request may succeed later.
func Transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return true
	}
	// A server still bringing JetStream up may fail to create a stream's
	// or a consumer's store, or say it is not available yet.
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jsErrNotAvailable ||
		(apiErr.ErrorCode == jsErrStreamCreate || apiErr.ErrorCode == jsErrConsumerCreate) &&
			strings.HasPrefix(apiErr.Description, "error creating store")
}

// JetStream error codes nats.go has no name for.
const (
	jsErrStreamCreate   jetstream.ErrorCode = 10049 // stream create failed: "{err}"
	jsErrConsumerCreate jetstream.ErrorCode = 10012 // consumer create failed: "{err}"
	jsErrNotAvailable   jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
)

func ensureOnce(ctx context.Context, js jetstream.JetStream, cfg Config) (*Topology, error) {
	ns := cfg.Namespace
	lim := cfg.Limits
	streams := []jetstream.StreamConfig{
		{
			Name:        ns.JobsStream(),
			Description: "makerfleet job specs",
			Subjects:    []string{ns.subject("job") + "*"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			MaxMsgSize:  cfg.MaxMsgSize,
			Duplicates:  10 * time.Minute,
			// One subject per tenant: the server bounds each tenant's queue.
			MaxMsgsPerSubject:    lim.QueuedJobsPerTenant,
			Discard:              jetstream.DiscardNew,
			DiscardNewPerSubject: lim.QueuedJobsPerTenant > 0,
			MaxBytes:             bytesFor(lim.JobsBytes, cfg.Storage),
		},
		{
			Name:        ns.SamplesStream(),
			Description: "makerfleet sample requests",
			Subjects:    []string{ns.subject("sample") + "*.*"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     cfg.workStorage(),
			Replicas:    cfg.Replicas,
			MaxMsgSize:  cfg.MaxMsgSize,
			MaxAge:      24 * time.Hour,
			Duplicates:  cfg.WorkDuplicates,
		},
		{
			Name:        ns.ResultsStream(),
			Description: "makerfleet sample results",
			Subjects:    []string{ns.subject("result") + "*.*.*"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     cfg.workStorage(),
			Replicas:    cfg.Replicas,
			MaxMsgSize:  cfg.MaxMsgSize,
			MaxAge:      24 * time.Hour,
			Duplicates:  cfg.WorkDuplicates,
			// Voters publish here: a flood drops the oldest results (which
			// honest ones are not: their owner reads them at once).
			MaxBytes: bytesFor(lim.ResultsBytes, cfg.workStorage()),
			Discard:  jetstream.DiscardOld,
		},
	}
	streams = append(streams,
		jetstream.StreamConfig{
			Name:        ns.JournalStream(),
			Description: "makerfleet decision journal and checkpoints",
			Subjects:    []string{ns.subject("journal") + "*.*.*"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			MaxMsgSize:  cfg.MaxMsgSize,
			Duplicates:  cfg.JournalDuplicates,
			// Entries are never deleted one by one; a finished job's
			// subjects may be purged as a whole.
			DenyDelete: true,
		},
		jetstream.StreamConfig{
			Name:        ns.BatchesStream(),
			Description: "makerfleet batch input lines, one message per line, in order",
			Subjects:    []string{ns.subject("batch") + "*.*"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			MaxMsgSize:  cfg.MaxMsgSize,
			MaxAge:      30 * 24 * time.Hour,
			// Full, it refuses a new batch rather than drop stored lines.
			MaxBytes: bytesFor(lim.BatchesBytes, cfg.Storage),
			Discard:  jetstream.DiscardNew,
		},
		jetstream.StreamConfig{
			Name:        ns.DLQStream(),
			Description: "makerfleet dead letters: messages the fleet gave up on, with why",
			Subjects:    []string{ns.subject("dlq") + "*.*"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			MaxMsgSize:  cfg.MaxMsgSize + 64<<10,
			MaxAge:      30 * 24 * time.Hour,
			Duplicates:  10 * time.Minute,
			// Voters publish here: a flood keeps the newest, and each job
			// (one subject) its last DeadLettersPerJob.
			MaxMsgsPerSubject: lim.DeadLettersPerJob,
			MaxBytes:          bytesFor(lim.DLQBytes, cfg.Storage),
			Discard:           jetstream.DiscardOld,
		},
	)
	for _, sc := range streams {
		if _, err := ensureStreamLog(ctx, js, sc, cfg.Logger); err != nil {
			return nil, err
		}
	}
	consumers := []struct {
		stream string
		cfg    jetstream.ConsumerConfig
	}{
		{ns.SamplesStream(), jetstream.ConsumerConfig{
			Durable:       ConsumerVoters,
			Description:   "every voter pulls sample requests from here",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.SampleAckWait,
			MaxDeliver:    cfg.SampleMaxDeliver,
			MaxAckPending: 20_000,
			FilterSubject: ns.subject("sample") + "*.*",
		}},
		{ns.JobsStream(), jetstream.ConsumerConfig{
			Durable:       ConsumerCoordinators,
			Description:   "every coordinator takes jobs from here",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.JobAckWait,
			MaxAckPending: 10_000,
			FilterSubject: ns.subject("job") + "*",
		}},
	}
	for _, c := range consumers {
		if err := ensureConsumer(ctx, js, c.stream, c.cfg); err != nil {
			return nil, err
		}
	}
	status, err := ensureKVLog(ctx, js, cfg.Logger, jetstream.KeyValueConfig{
		Bucket: ns.StatusBucket(), Description: "makerfleet job progress", History: 1,
		TTL: 30 * 24 * time.Hour, Storage: cfg.Storage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, err
	}
	reports, err := ensureKVLog(ctx, js, cfg.Logger, jetstream.KeyValueConfig{
		Bucket: ns.ReportsBucket(), Description: "makerfleet job reports", History: 1,
		Storage: cfg.Storage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, err
	}
	jobs, err := ensureKVLog(ctx, js, cfg.Logger, jetstream.KeyValueConfig{
		Bucket: ns.JobsBucket(), Description: "makerfleet job registry", History: 1,
		Storage: cfg.Storage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, err
	}
	leases, err := ensureKVLog(ctx, js, cfg.Logger, jetstream.KeyValueConfig{
		Bucket: ns.LeasesBucket(), Description: "makerfleet job leases", History: 1,
		Storage: cfg.Storage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, err
	}
	tasks, err := ensureKVLog(ctx, js, cfg.Logger, jetstream.KeyValueConfig{
		Bucket: ns.TasksBucket(), Description: "makerfleet task registry: task specs by name and version, immutable",
		History: 1, MaxValueSize: int32(schemas.MaxTaskSpecBytes) + 64<<10, Storage: cfg.Storage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, err
	}
	topo := &Topology{NS: ns, JS: js, Config: cfg, Status: status, Reports: reports, Jobs: jobs, Leases: leases, Tasks: tasks}
	for _, b := range []struct {
		dst  *jetstream.KeyValue
		name string
		desc string
	}{
		{&topo.Quotas, ns.QuotasBucket(), "makerfleet tenant quotas, read live by every coordinator"},
		{&topo.APIKeys, ns.APIKeysBucket(), "makerfleet API keys, by the SHA-256 of the key"},
		{&topo.Batches, ns.BatchesBucket(), "makerfleet batch records"},
		{&topo.Prices, ns.PricesBucket(), "makerfleet price table: what each model's tokens cost, set by the operator"},
	} {
		kv, err := ensureKVLog(ctx, js, cfg.Logger, jetstream.KeyValueConfig{
			Bucket: b.name, Description: b.desc, History: 1, Storage: cfg.Storage, Replicas: cfg.Replicas,
		})
		if err != nil {
			return nil, err
		}
		*b.dst = kv
	}
	return topo, nil
}

// ensureStream is ensureStreamLog with the default logger.
func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) (jetstream.Stream, error) {
	return ensureStreamLog(ctx, js, sc, slog.Default())
}

func ensureStreamLog(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, log *slog.Logger) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, sc.Name)
	if err == nil {
		// An existing stream (made by an operator, or by an older release)
		// must still take every subject this release publishes.
		have := s.CachedInfo().Config.Subjects
		for _, want := range sc.Subjects {
			if !slices.ContainsFunc(have, func(h string) bool { return covers(h, want) }) {
				return nil, fmt.Errorf("%w: stream %s takes subjects %v, which do not cover %s; add it (nats stream edit) or remove the stream",
					ErrTopology, sc.Name, have, want)
			}
		}
		if s, err = raiseReplicas(ctx, js, s, sc.Replicas, log); err != nil {
			return nil, err
		}
		return setLimits(ctx, js, s, sc, log)
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("bus: stream %s: %w", sc.Name, err)
	}
	s, err = js.CreateStream(ctx, sc)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.Stream(ctx, sc.Name) // another role created it first
	}
	if err != nil {
		return nil, fmt.Errorf("bus: create stream %s: %w", sc.Name, err)
	}
	return s, nil
}

func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, cc jetstream.ConsumerConfig) error {
	_, err := js.Consumer(ctx, stream, cc.Durable)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("bus: consumer %s: %w", cc.Durable, err)
	}
	if _, err := js.CreateConsumer(ctx, stream, cc); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("bus: create consumer %s: %w", cc.Durable, err)
	}
	return nil
}

// ensureKV is ensureKVLog with the default logger.
func ensureKV(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return ensureKVLog(ctx, js, slog.Default(), kc)
}

// ensureKVLog ensures bucket kc and returns it with watches that survive a
// node loss (watchKV).
func ensureKVLog(ctx context.Context, js jetstream.JetStream, log *slog.Logger, kc jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := ensureKVOnce(ctx, js, log, kc)
	if err != nil {
		return nil, err
	}
	return resilient(kv), nil
}

func ensureKVOnce(ctx context.Context, js jetstream.JetStream, log *slog.Logger, kc jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, kc.Bucket)
	if err == nil {
		// A bucket is the stream KV_<bucket>.
		if s, err := js.Stream(ctx, "KV_"+kc.Bucket); err == nil {
			if _, err := raiseReplicas(ctx, js, s, max(kc.Replicas, 1), log); err != nil {
				return nil, err
			}
		}
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("bus: bucket %s: %w", kc.Bucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, kc)
	if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.KeyValue(ctx, kc.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: create bucket %s: %w", kc.Bucket, err)
	}
	return kv, nil
}

// raiseReplicas raises stream s to want replicas when it has fewer: the
// topology's replicas are the most any of its creators asked for, never
// those of whichever role happened to start first. Never lowered, so
// creators started with different settings do not fight.
func raiseReplicas(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, want int, log *slog.Logger) (jetstream.Stream, error) {
	sc := s.CachedInfo().Config
	if sc.Replicas >= want {
		return s, nil
	}
	have := max(sc.Replicas, 1)
	sc.Replicas = want
	up, err := js.UpdateStream(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s has %d replicas; raising it to %d: %w", ErrTopology, sc.Name, have, want, err)
	}
	log.Info("stream replicas raised", "stream", sc.Name, "from", have, "to", want)
	return up, nil
}

// setLimits gives an existing stream the size and per-subject limits of
// sc that it has none of (one an older release made); a limit it has,
// an operator's, stays. An identity that may not update streams (the
// judge) leaves them as they are, with a warning: the stream works
// without, as it did.
func setLimits(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, want jetstream.StreamConfig, log *slog.Logger) (jetstream.Stream, error) {
	sc := s.CachedInfo().Config
	changed := false
	if sc.MaxBytes <= 0 && want.MaxBytes > 0 {
		sc.MaxBytes, changed = want.MaxBytes, true
	}
	if sc.MaxMsgsPerSubject <= 0 && want.MaxMsgsPerSubject > 0 {
		sc.MaxMsgsPerSubject, sc.DiscardNewPerSubject, changed = want.MaxMsgsPerSubject, want.DiscardNewPerSubject, true
	}
	if !changed {
		return s, nil
	}
	sc.Discard = want.Discard
	up, err := js.UpdateStream(ctx, sc)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		log.Warn("stream limits not set: run maker topology create as the admin to set them", "stream", sc.Name,
			"max_bytes", sc.MaxBytes, "max_msgs_per_subject", sc.MaxMsgsPerSubject, "err", err)
		return s, nil
	}
	log.Info("stream limits set", "stream", sc.Name, "max_bytes", sc.MaxBytes, "max_msgs_per_subject", sc.MaxMsgsPerSubject)
	return up, nil
}

// Teardown deletes the namespace's streams and buckets, everything Ensure
// created: for throwaway namespaces (a private in-process fleet on a
// shared server). Missing ones are skipped.
func Teardown(ctx context.Context, js jetstream.JetStream, ns Namespace) error {
	var errs []error
	for _, name := range []string{ns.JobsStream(), ns.SamplesStream(), ns.ResultsStream(), ns.JournalStream(), ns.DLQStream(), ns.BatchesStream()} {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, err)
		}
	}
	for _, name := range []string{ns.StatusBucket(), ns.ReportsBucket(), ns.JobsBucket(), ns.LeasesBucket(), ns.TasksBucket(), ns.QuotasBucket(), ns.APIKeysBucket(), ns.BatchesBucket(), ns.PricesBucket(), ns.RetentionBucket(), ns.CalibrationsBucket()} {
		if err := js.DeleteKeyValue(ctx, name); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// covers reports whether subject filter f matches every subject filter
// want matches.
func covers(f, want string) bool {
	ft, wt := strings.Split(f, "."), strings.Split(want, ".")
	for i, t := range ft {
		if t == ">" {
			return len(wt) > i
		}
		if i >= len(wt) {
			return false
		}
		switch {
		case t == "*":
			if wt[i] == ">" {
				return false
			}
		case t != wt[i]:
			return false
		}
	}
	return len(ft) == len(wt)
}
