package topology

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// Config sets the fleet topology's durability and timing. Zero fields take
// the documented defaults.
type Config struct {
	// Namespace of the fleet; "" is bus.DefaultNamespace.
	Namespace bus.Namespace
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
	// WorkDuplicates is the duplicate window (Nats-Msg-Id) of the two
	// work queues, sample requests and results, and JournalDuplicates the
	// journal's. Default DefaultWorkDuplicates (30s) and
	// DefaultJournalDuplicates (1m). The server keeps every id of a
	// window in memory (about 150 bytes an id), so its memory is the id
	// rate times the window, reached one window into a job and flat after
	// it. A window needs only to outlast its publishers' retries
	// (docs/durability.md "Duplicate windows"): a voter retries a result's
	// publish for up to 10s, and a copy the window missed would be
	// accounted twice, so WorkDuplicates is at least MinWorkDuplicates; a
	// journal append is retried for under a minute, and one retried past
	// the window is still written once (it is fenced, and recognised by
	// its id). Sample requests carry no id (none is published twice): their
	// window holds only dead letters' replays.
	WorkDuplicates    time.Duration
	JournalDuplicates time.Duration
	// SetDuplicates has Ensure give existing streams the windows above
	// that are set (not zero), whatever they hold: `maker topology create
	// --work-duplicates/--journal-duplicates`. Without it an existing
	// stream keeps its window (roles started with other windows never
	// fight over it), but for one an older release made with its windows
	// (2 minutes on the work queues, 10 on the journal, and no
	// DuplicatesMark), which is given this config's. Default false.
	SetDuplicates bool
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
	// PresenceTTL is how long the presence bucket keeps a record its
	// writer stopped renewing: a voter or coordinator silent that long
	// is gone from the fleet view. It is set when the bucket is created.
	// Default 30s; at least 1s.
	PresenceTTL time.Duration
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
	// InputsBytes bounds the inputs store (jobs' params kept by
	// reference, internal/inputs): full, it refuses the next job whose
	// params are new to it. Default 8 GiB.
	InputsBytes int64
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
	def(&l.InputsBytes, 8<<30)
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
		c.WorkDuplicates = DefaultWorkDuplicates
	}
	if c.JournalDuplicates == 0 {
		c.JournalDuplicates = DefaultJournalDuplicates
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
	if c.PresenceTTL == 0 {
		c.PresenceTTL = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// validate checks cfg after its defaults.
func (c *Config) validate() error {
	if err := c.Namespace.Validate(); err != nil {
		return err
	}
	if c.Replicas < 1 || c.SampleMaxDeliver < 1 || c.SampleAckWait < time.Second || c.JobAckWait < time.Second || c.StartupWait < 0 || c.PresenceTTL < time.Second {
		return fmt.Errorf("bus: invalid config %+v", *c)
	}
	return CheckDuplicates(c.WorkDuplicates, c.JournalDuplicates)
}

// The duplicate windows' defaults and bounds (Config.WorkDuplicates,
// Config.JournalDuplicates).
const (
	DefaultWorkDuplicates    = 30 * time.Second
	DefaultJournalDuplicates = time.Minute
	// ResultPublishRetry bounds a voter's retries of one result's
	// publish: a retry after it could reach the stream after the
	// result's id has left the window, and be counted twice.
	ResultPublishRetry = 10 * time.Second
	// MinWorkDuplicates outlasts a voter's retries of a result's publish
	// (ResultPublishRetry) with room for a copy that waited in the
	// server's queues.
	MinWorkDuplicates = ResultPublishRetry + 5*time.Second
	// MinJournalDuplicates: the journal's guarantees need no window (an
	// append is fenced, and one retried past the window is recognised by
	// its id); the bound refuses only a window too short to mean one.
	MinJournalDuplicates = time.Second
	// MaxDuplicates is the work queues' MaxAge, which a window may not
	// pass.
	MaxDuplicates = 24 * time.Hour
)

// CheckDuplicates checks the windows work and journal; zero is the
// default. The error wraps ErrDuplicates and says why the bound.
func CheckDuplicates(work, journal time.Duration) error {
	if work != 0 && (work < MinWorkDuplicates || work > MaxDuplicates) {
		return fmt.Errorf("%w: the work queues' window %v is not within %v..%v: a voter retries a result's publish for 10s, and a copy the window missed would be accounted twice",
			ErrDuplicates, work, MinWorkDuplicates, MaxDuplicates)
	}
	if journal != 0 && (journal < MinJournalDuplicates || journal > MaxDuplicates) {
		return fmt.Errorf("%w: the journal's window %v is not within %v..%v", ErrDuplicates, journal, MinJournalDuplicates, MaxDuplicates)
	}
	return nil
}

// JudgeConfig sets the judge topology's durability and timing. Zero fields
// take the documented defaults.
type JudgeConfig struct {
	// Namespace of the fleet; "" is bus.DefaultNamespace.
	Namespace bus.Namespace
	// Storage of every stream and bucket: jetstream.FileStorage (default)
	// or jetstream.MemoryStorage.
	Storage jetstream.StorageType
	// Replicas in a clustered server. Default 1.
	Replicas int
	// AckWait is how long a judge may hold a request without signalling
	// progress before another takes it. Default 60s.
	AckWait time.Duration
	// MaxDeliver bounds deliveries of one request. Default 3.
	MaxDeliver int
	// AnswerTTL is how long answers, sessions and approvals are kept.
	// Default 30 days.
	AnswerTTL time.Duration
	// MaxMsgSize bounds every request. Default 1 MiB.
	MaxMsgSize int32
	// QueuedPerTenant bounds one tenant's break-glass requests waiting for
	// a judge (the stream's subject per tenant): the server refuses the
	// next. Default 100; -1 lifts it.
	QueuedPerTenant int64
	// RequestBytes bounds each request stream (break glass, arbitration):
	// full, it refuses new requests. Default 256 MiB (memory streams at
	// most MemoryStreamBytes).
	RequestBytes int64
	// StartupWait bounds how long EnsureJudge retries while the server does
	// not answer. Default 60s.
	StartupWait time.Duration
}

func (c *JudgeConfig) defaults() {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.AckWait == 0 {
		c.AckWait = 60 * time.Second
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 3
	}
	if c.AnswerTTL == 0 {
		c.AnswerTTL = 30 * 24 * time.Hour
	}
	if c.MaxMsgSize == 0 {
		c.MaxMsgSize = 1 << 20
	}
	if c.QueuedPerTenant == 0 {
		c.QueuedPerTenant = 100
	}
	if c.RequestBytes == 0 {
		c.RequestBytes = 256 << 20
	}
	if c.StartupWait == 0 {
		c.StartupWait = 60 * time.Second
	}
}

// validate checks cfg after its defaults.
func (c *JudgeConfig) validate() error {
	if err := c.Namespace.Validate(); err != nil {
		return err
	}
	if c.Replicas < 1 || c.MaxDeliver < 1 || c.AckWait < time.Second || c.AnswerTTL < time.Minute || c.StartupWait < 0 {
		return fmt.Errorf("bus: invalid judge config %+v", *c)
	}
	return nil
}
