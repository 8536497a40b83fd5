package topology

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// Kind is what a declaration makes on the server.
type Kind int

const (
	// Stream is a JetStream stream.
	Stream Kind = iota + 1
	// Consumer is a durable pull consumer of a stream.
	Consumer
	// Bucket is a KV bucket (the stream KV_<bucket>).
	Bucket
	// Objects is an object store (the stream OBJ_<bucket>).
	Objects
)

func (k Kind) String() string {
	switch k {
	case Stream:
		return "stream"
	case Consumer:
		return "consumer"
	case Bucket:
		return "bucket"
	case Objects:
		return "object store"
	}
	return "unknown"
}

// Creator says who creates a declaration's resource; every other role
// only binds it, and readers never create anything.
type Creator int

const (
	// Fleet resources are created by Ensure: coordinators, `maker
	// topology create`, the embedded fleets of `maker run` and the tests.
	Fleet Creator = iota + 1
	// Judge resources are created by EnsureJudge: judges, `maker topology
	// create`, and the clients that send the judge requests.
	Judge
	// Feature resources are created by the feature that owns them the
	// first time it writes one (FeatureBucket): a fleet that never sets
	// a retention policy or a calibration has no bucket for them.
	Feature
)

// Decl declares one stream, consumer or bucket: what it is, who creates
// it, which feature owns it, whether readers need it, and its config.
type Decl struct {
	Kind    Kind
	Creator Creator
	// Owner is the feature whose storage it is: the package that reads
	// and writes it.
	Owner string
	// Required resources must exist for Open, OpenJudge and Await to bind
	// the topology; a server without one has no fleet (or no judge).
	Required bool
	// Stream is the config of a Stream.
	Stream jetstream.StreamConfig
	// OldDuplicates is, for a stream whose duplicate window is the
	// config's (WorkDuplicates, JournalDuplicates), the window releases
	// before those were sized gave it: Ensure gives a stream it finds
	// with that window and no DuplicatesMark the config's. Zero for a
	// stream whose window is fixed.
	OldDuplicates time.Duration
	// Of names a Consumer's stream; Consumer is its config.
	Of       string
	Consumer jetstream.ConsumerConfig
	// Bucket is the config of a Bucket.
	Bucket jetstream.KeyValueConfig
	// Objects is the config of an object store.
	Objects jetstream.ObjectStoreConfig
}

// Name is the name of the declared stream or bucket, or a consumer's
// durable name.
func (d Decl) Name() string {
	switch d.Kind {
	case Stream:
		return d.Stream.Name
	case Consumer:
		return d.Consumer.Durable
	case Objects:
		return d.Objects.Bucket
	}
	return d.Bucket.Bucket
}

// Table is every stream, consumer and bucket of namespace ns, the fleet's
// (from cfg) and the judge's (from jcfg), in the order they are created:
// streams before their consumers, buckets last. Zero fields of cfg and
// jcfg take their defaults. This is the one place the topology is
// declared: Ensure and EnsureJudge create from it, Open, OpenJudge and
// Await bind from it, Teardown and TeardownJudge delete from it.
func Table(ns bus.Namespace, cfg Config, jcfg JudgeConfig) []Decl {
	cfg.defaults()
	jcfg.defaults()
	lim := cfg.Limits
	work := cfg.workStorage()
	kv := func(creator Creator, owner string, required bool, kc jetstream.KeyValueConfig) Decl {
		if kc.History == 0 {
			kc.History = 1
		}
		return Decl{Kind: Bucket, Creator: creator, Owner: owner, Required: required, Bucket: kc}
	}
	fleetKV := func(owner, name, desc string) Decl {
		return kv(Fleet, owner, true, jetstream.KeyValueConfig{Bucket: name, Description: desc, Storage: cfg.Storage, Replicas: cfg.Replicas})
	}
	judgeKV := func(name, desc string) Decl {
		return kv(Judge, "judge", true, jetstream.KeyValueConfig{
			Bucket: name, Description: desc, TTL: jcfg.AnswerTTL,
			MaxValueSize: jcfg.MaxMsgSize + 64<<10, Storage: jcfg.Storage, Replicas: jcfg.Replicas,
		})
	}
	// The judge's request streams, one a kind, each pulled by every judge
	// through its durable bus.ConsumerJudges.
	judgeRequests := func(stream, subject, what string, perTenant int64) Decl {
		return Decl{Kind: Stream, Creator: Judge, Owner: "judge", Stream: jetstream.StreamConfig{
			Name:        stream,
			Description: "makerfleet " + what,
			Subjects:    []string{subject},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jcfg.Storage,
			Replicas:    jcfg.Replicas,
			MaxMsgSize:  jcfg.MaxMsgSize,
			MaxAge:      jcfg.AnswerTTL,
			Duplicates:  10 * time.Minute,
			// One subject per tenant: the server bounds each tenant's
			// queue, and a full stream refuses rather than drops.
			MaxMsgsPerSubject:    perTenant,
			DiscardNewPerSubject: perTenant > 0,
			Discard:              jetstream.DiscardNew,
			MaxBytes:             bytesFor(jcfg.RequestBytes, jcfg.Storage),
		}}
	}
	judgeConsumer := func(stream, subject, what string) Decl {
		return Decl{Kind: Consumer, Creator: Judge, Owner: "judge", Of: stream, Consumer: jetstream.ConsumerConfig{
			Durable:       bus.ConsumerJudges,
			Description:   "every judge pulls " + what + " from here",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       jcfg.AckWait,
			MaxDeliver:    jcfg.MaxDeliver,
			MaxAckPending: 1000,
			FilterSubject: subject,
		}}
	}
	return []Decl{
		// The fleet's streams.
		{Kind: Stream, Creator: Fleet, Owner: "jobs (queue), coordinator (intake)", Required: true, Stream: jetstream.StreamConfig{
			Name:        ns.JobsStream(),
			Description: "makerfleet job specs",
			Subjects:    []string{ns.StreamSubjects("job", 1)},
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
		}},
		{Kind: Stream, Creator: Fleet, Owner: "coordinator (requests), voter (pulls)", Required: true, Stream: jetstream.StreamConfig{
			Name:        ns.SamplesStream(),
			Description: "makerfleet sample requests",
			Subjects:    []string{ns.StreamSubjects("sample", 2)},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     work,
			Replicas:    cfg.Replicas,
			MaxMsgSize:  cfg.MaxMsgSize,
			MaxAge:      24 * time.Hour,
			// Requests carry no message id (each is published once):
			// the window holds only dead letters' replays.
			Duplicates: cfg.WorkDuplicates,
			Metadata:   sizedWindow(),
		}, OldDuplicates: 2 * time.Minute},
		{Kind: Stream, Creator: Fleet, Owner: "voter (publishes), coordinator (reads)", Required: true, Stream: jetstream.StreamConfig{
			Name:        ns.ResultsStream(),
			Description: "makerfleet sample results",
			Subjects:    []string{ns.StreamSubjects("result", 3)},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     work,
			Replicas:    cfg.Replicas,
			MaxMsgSize:  cfg.MaxMsgSize,
			MaxAge:      24 * time.Hour,
			// A result's id is its sample's and delivery's: the window
			// drops a voter's retried publish of one answer (10s at most),
			// which would otherwise be accounted twice.
			Duplicates: cfg.WorkDuplicates,
			Metadata:   sizedWindow(),
			// Voters publish here: a flood drops the oldest results (which
			// honest ones are not: their owner reads them at once).
			MaxBytes: bytesFor(lim.ResultsBytes, work),
			Discard:  jetstream.DiscardOld,
		}, OldDuplicates: 2 * time.Minute},
		{Kind: Stream, Creator: Fleet, Owner: "coordinator (journal)", Required: true, Stream: jetstream.StreamConfig{
			Name:        ns.JournalStream(),
			Description: "makerfleet decision journal and checkpoints",
			Subjects:    []string{ns.StreamSubjects("journal", 3)},
			Retention:   jetstream.LimitsPolicy,
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			MaxMsgSize:  cfg.MaxMsgSize,
			// Appends are fenced: the window spares a retried one the read
			// of the last entry that recognises it.
			Duplicates: cfg.JournalDuplicates,
			Metadata:   sizedWindow(),
			// Entries are never deleted one by one; a finished job's
			// subjects may be purged as a whole.
			DenyDelete: true,
		}, OldDuplicates: 10 * time.Minute},
		{Kind: Stream, Creator: Fleet, Owner: "batch", Required: true, Stream: jetstream.StreamConfig{
			Name:        ns.BatchesStream(),
			Description: "makerfleet batch input lines, one message per line, in order",
			Subjects:    []string{ns.StreamSubjects("batch", 2)},
			Retention:   jetstream.LimitsPolicy,
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			MaxMsgSize:  cfg.MaxMsgSize,
			MaxAge:      30 * 24 * time.Hour,
			// The server's default, declared: each line's id (batch and
			// line) is kept 2 minutes, a burst per batch, not a cost per
			// step.
			Duplicates: 2 * time.Minute,
			// Full, it refuses a new batch rather than drop stored lines.
			MaxBytes: bytesFor(lim.BatchesBytes, cfg.Storage),
			Discard:  jetstream.DiscardNew,
		}},
		{Kind: Stream, Creator: Fleet, Owner: "bus (dead letters), coordinator (DLQ mover)", Required: true, Stream: jetstream.StreamConfig{
			Name:        ns.DLQStream(),
			Description: "makerfleet dead letters: messages the fleet gave up on, with why",
			Subjects:    []string{ns.StreamSubjects("dlq", 2)},
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
		}},
		// Webhook deliveries to make: each job's or batch's end once (its
		// delivery id is the Msg-Id and the subject's last token), taken by
		// one maker serve at a time, retried by it with backoff, kept two
		// days at most.
		{Kind: Stream, Creator: Fleet, Owner: "webhook (coordinator, batch and api publish; serve delivers)", Required: true, Stream: jetstream.StreamConfig{
			Name:        ns.WebhooksStream(),
			Description: "makerfleet webhook deliveries to make, one per job or batch end",
			Subjects:    []string{ns.StreamSubjects("webhook", 2)},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			MaxMsgSize:  WebhookMaxMsgSize,
			MaxAge:      48 * time.Hour,
			Duplicates:  10 * time.Minute,
			// One message per delivery (its subject): the same end queued
			// again while the first waits, even past the duplicate window,
			// is refused, so no two servers hold one delivery at once.
			MaxMsgsPerSubject:    1,
			DiscardNewPerSubject: true,
			// Full, it refuses a new delivery rather than drop queued ones.
			MaxBytes: bytesFor(WebhookStreamBytes, cfg.Storage),
			Discard:  jetstream.DiscardNew,
		}},
		// The fleet's shared consumers.
		{Kind: Consumer, Creator: Fleet, Owner: "voter", Required: true, Of: ns.SamplesStream(), Consumer: jetstream.ConsumerConfig{
			Durable:       bus.ConsumerVoters,
			Description:   "every voter pulls sample requests from here",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.SampleAckWait,
			MaxDeliver:    cfg.SampleMaxDeliver,
			MaxAckPending: 20_000,
			FilterSubject: ns.StreamSubjects("sample", 2),
		}},
		{Kind: Consumer, Creator: Fleet, Owner: "coordinator (intake)", Required: true, Of: ns.JobsStream(), Consumer: jetstream.ConsumerConfig{
			Durable:       bus.ConsumerCoordinators,
			Description:   "every coordinator takes jobs from here",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.JobAckWait,
			MaxAckPending: 10_000,
			FilterSubject: ns.StreamSubjects("job", 1),
		}},
		{Kind: Consumer, Creator: Fleet, Owner: "webhook (serve delivers)", Required: true, Of: ns.WebhooksStream(), Consumer: jetstream.ConsumerConfig{
			Durable:       bus.ConsumerWebhooks,
			Description:   "every maker serve pulls webhook deliveries from here",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       time.Minute,
			MaxAckPending: 1000,
			FilterSubject: ns.StreamSubjects("webhook", 2),
		}},
		// The fleet's buckets.
		kv(Fleet, "coordinator (progress)", true, jetstream.KeyValueConfig{
			Bucket: ns.StatusBucket(), Description: "makerfleet job progress",
			TTL: 30 * 24 * time.Hour, Storage: cfg.Storage, Replicas: cfg.Replicas,
		}),
		fleetKV("coordinator (reports)", ns.ReportsBucket(), "makerfleet job reports"),
		fleetKV("jobs (registry)", ns.JobsBucket(), "makerfleet job registry"),
		fleetKV("coordinator (leases)", ns.LeasesBucket(), "makerfleet job leases"),
		kv(Fleet, "task registry", true, jetstream.KeyValueConfig{
			Bucket: ns.TasksBucket(), Description: "makerfleet task registry: task specs by name and version, immutable",
			MaxValueSize: int32(schemas.MaxTaskSpecBytes) + 64<<10, Storage: cfg.Storage, Replicas: cfg.Replicas,
		}),
		fleetKV("quota", ns.QuotasBucket(), "makerfleet tenant quotas, read live by every coordinator"),
		fleetKV("apikey", ns.APIKeysBucket(), "makerfleet API keys, by the SHA-256 of the key"),
		fleetKV("batch", ns.BatchesBucket(), "makerfleet batch records"),
		fleetKV("pricing", ns.PricesBucket(), "makerfleet price table: what each model's tokens cost, set by the operator"),
		fleetKV("providers", ns.ProvidersBucket(), "makerfleet provider registry: where each model is served and its limits, set by the operator"),
		// Presence records (internal/presence): each voter and coordinator
		// renews its own every few seconds; one not renewed for
		// PresenceTTL is gone. Created with the fleet, not required, so a
		// fleet made by an older release binds without it (its roles then
		// publish no presence). In memory: it holds nothing a restart
		// should keep.
		kv(Fleet, "presence", false, jetstream.KeyValueConfig{
			Bucket: ns.PresenceBucket(), Description: "makerfleet presence: live voters and coordinators, each record renewed by its writer",
			TTL: cfg.PresenceTTL, MaxValueSize: schemas.MaxPresenceBytes, MaxBytes: PresenceBytes,
			Storage: jetstream.MemoryStorage, Replicas: cfg.Replicas,
		}),
		kv(Fleet, "webhook (serve records attempts)", true, jetstream.KeyValueConfig{
			Bucket: ns.WebhooksBucket(), Description: "makerfleet webhook deliveries: <tenant>.<delivery id>, every attempt",
			TTL: 30 * 24 * time.Hour, Storage: cfg.Storage, Replicas: cfg.Replicas,
		}),
		// Jobs' params kept by reference (internal/inputs): created with
		// the fleet, not required, so a fleet made by an older release
		// binds without it (a job whose params need it is refused, saying
		// so). Kept InputsTTL after they were last stored.
		{Kind: Objects, Creator: Fleet, Owner: "inputs", Objects: jetstream.ObjectStoreConfig{
			Bucket: ns.InputsBucket(), Description: "makerfleet jobs' params by reference: sha256:<hex> of their bytes",
			TTL: InputsTTL, Storage: cfg.Storage, Replicas: cfg.Replicas, MaxBytes: bytesFor(lim.InputsBytes, cfg.Storage),
		}},
		// The features' buckets, made when first written.
		kv(Feature, "retention", false, jetstream.KeyValueConfig{
			Bucket: ns.RetentionBucket(), Description: "makerfleet retention policies: fleet, tenants, jobs",
			Storage: cfg.Storage, Replicas: cfg.Replicas,
		}),
		// Calibrations are fleet-wide facts, kept on file whatever the
		// fleet's storage; the replicas are the jobs stream's
		// (calibrate.OpenBucket).
		kv(Feature, "calibrate", false, jetstream.KeyValueConfig{
			Bucket: ns.CalibrationsBucket(), Description: "makerfleet model calibrations: <task>.<model>.<prompt version>",
			History: CalibrationHistory, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		}),
		// The judge's streams, consumers and buckets. Arbitration has a
		// stream of its own, not a second subject on the judge stream: a
		// judge stream made by an older release keeps working as it is
		// (readers do not require the arbitration stream), and an operator
		// can let the coordinator publish arbitrations without letting it
		// (or anyone) send break-glass requests, and the other way round.
		withRequired(judgeRequests(ns.JudgeStream(), ns.StreamSubjects("judge", 1), "break-glass requests", jcfg.QueuedPerTenant)),
		judgeRequests(ns.ArbitrateStream(), ns.StreamSubjects("arbitrate", 1), "arbitration requests", 0),
		{Kind: Stream, Creator: Judge, Owner: "judge (audit)", Required: true, Stream: jetstream.StreamConfig{
			Name:        ns.JudgeAuditStream(),
			Description: "makerfleet break-glass audit trail",
			Subjects:    []string{ns.StreamSubjects("judge_audit", 2)},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jcfg.Storage,
			Replicas:    jcfg.Replicas,
			MaxMsgSize:  jcfg.MaxMsgSize,
			Duplicates:  10 * time.Minute,
		}},
		judgeConsumer(ns.JudgeStream(), ns.StreamSubjects("judge", 1), "break-glass requests"),
		judgeConsumer(ns.ArbitrateStream(), ns.StreamSubjects("arbitrate", 1), "arbitration requests"),
		judgeKV(ns.JudgeAnswersBucket(), "makerfleet break-glass answers"),
		judgeKV(ns.JudgeSessionsBucket(), "makerfleet break-glass session limits"),
		judgeKV(ns.JudgeApprovalsBucket(), "makerfleet break-glass approvals"),
	}
}

// WebhookMaxMsgSize bounds a webhook delivery task; WebhookStreamBytes
// the webhook stream (a memory stream's at most MemoryStreamBytes).
const (
	WebhookMaxMsgSize  = 64 << 10
	WebhookStreamBytes = 256 << 20
)

// InputsTTL is how long the inputs store keeps params after they were
// last stored; a coordinator taking a job stores its params again, so
// they outlive every job that runs within it.
const InputsTTL = 30 * 24 * time.Hour

// PresenceBytes bounds the presence bucket: full, it refuses new records
// until old ones expire.
const PresenceBytes = 32 << 20

// CalibrationHistory is how many calibrations the calibrations bucket
// keeps per key: the latest and the ones it replaced.
const CalibrationHistory = 5

// DuplicatesMark is the metadata key of a stream whose duplicate window
// this release sized (Decl.OldDuplicates) or an operator set: Ensure keeps
// its window. A stream without it is an older release's (or made by
// hand).
const DuplicatesMark = "makerfleet.duplicates"

// sizedWindow is the metadata of a stream whose window is sized.
func sizedWindow() map[string]string { return map[string]string{DuplicatesMark: "sized"} }

func withRequired(d Decl) Decl {
	d.Required = true
	return d
}

// rows returns the declarations of table made by creator.
func rows(table []Decl, creator Creator) []Decl {
	var out []Decl
	for _, d := range table {
		if d.Creator == creator {
			out = append(out, d)
		}
	}
	return out
}
