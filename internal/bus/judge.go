package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The judge role's topology in the default namespace "maker":
//
//	stream MAKER_JUDGE        maker.v1.judge.<tenant>                  break-glass requests; work queue;
//	                                                                   durable "judges" shared by all judges
//	stream MAKER_ARBITRATE    maker.v1.arbitrate.<tenant>              arbitration requests; work queue;
//	                                                                   durable "judges" shared by all judges
//	stream MAKER_JUDGE_AUDIT  maker.v1.judge_audit.<tenant>.<session>  audit records; kept (limits policy)
//	KV maker_judge_answers    <tenant>.<request id>                    responses (held, then final)
//	KV maker_judge_sessions   <tenant>.<session>                       per-session invocations and spend
//	                          <tenant>.job.<job>                       per-job arbitrations and spend
//	                          <tenant>.tenant.window                   the tenant's calls and spend in the
//	                                                                   rolling window
//	KV maker_judge_approvals  <tenant>.<request id>                    requests held for a person
//	core NATS                 maker.v1.judge_approve.<identity>        a person's approve or deny, request
//	                                                                   and reply, queue group "judges"
//
// Every key starts with the tenant the request's subject names, so that a
// server's permissions can let tenant T read (and watch) only keys T.>:
// a request id alone says nothing of whose it is, and two tenants may
// pick the same one. The identity in an approval's subject is the
// approver: the server lets only the approver and admin identities
// publish there, each only on its own name, so the subject proves who
// approves.
//
// Arbitration has a stream of its own, not a second subject on
// MAKER_JUDGE: a judge stream made by an older release keeps working as
// it is, and an operator can let the coordinator publish arbitrations
// without letting it (or anyone) send break-glass requests, and the
// other way round.

// ConsumerJudges is the durable every judge pulls requests from, on each
// of its request streams.
const ConsumerJudges = "judges"

// JudgeStream names the namespace's break-glass request stream.
func (ns Namespace) JudgeStream() string { return ns.stream("JUDGE") }

// ArbitrateStream names the namespace's arbitration request stream.
func (ns Namespace) ArbitrateStream() string { return ns.stream("ARBITRATE") }

// JudgeAuditStream names the namespace's audit stream.
func (ns Namespace) JudgeAuditStream() string { return ns.stream("JUDGE_AUDIT") }

// JudgeSubject is where break-glass requests of tenant go.
func (ns Namespace) JudgeSubject(tenant string) string { return ns.subject("judge") + tenant }

// ArbitrateSubject is where the arbitration requests of tenant go.
func (ns Namespace) ArbitrateSubject(tenant string) string { return ns.subject("arbitrate") + tenant }

// JudgeAuditSubject is where the audit records of one session go.
func (ns Namespace) JudgeAuditSubject(tenant, session string) string {
	return ns.subject("judge_audit") + tenant + "." + session
}

// JudgeAuditFilter matches the audit records of tenant and session; an
// empty tenant or session matches every one.
func (ns Namespace) JudgeAuditFilter(tenant, session string) string {
	if tenant == "" {
		tenant = "*"
	}
	if session == "" {
		session = "*"
	}
	return ns.JudgeAuditSubject(tenant, session)
}

// judgeBucket names the judge's bucket of kind: <ns>_judge_<kind>.
func (ns Namespace) judgeBucket(kind string) string {
	return strings.ReplaceAll(ns.String(), "-", "_") + "_judge_" + kind
}

// JudgeAnswersBucket, JudgeSessionsBucket and JudgeApprovalsBucket name
// the judge's KV buckets.
func (ns Namespace) JudgeAnswersBucket() string   { return ns.judgeBucket("answers") }
func (ns Namespace) JudgeSessionsBucket() string  { return ns.judgeBucket("sessions") }
func (ns Namespace) JudgeApprovalsBucket() string { return ns.judgeBucket("approvals") }

// JudgeApproveSubject is where identity sends its approvals and denials
// of held requests (core NATS request and reply).
func (ns Namespace) JudgeApproveSubject(identity string) string {
	return ns.subject("judge_approve") + identity
}

// JudgeApproveFilter matches every identity's approvals.
func (ns Namespace) JudgeApproveFilter() string { return ns.subject("judge_approve") + "*" }

// JudgeRequestTenant returns the tenant a break-glass or arbitration
// request subject names (its last token), or false when subject is
// neither kind's in ns.
func (ns Namespace) JudgeRequestTenant(subject string) (string, bool) {
	for _, kind := range []string{"judge", "arbitrate"} {
		if t, ok := strings.CutPrefix(subject, ns.subject(kind)); ok && t != "" && !strings.ContainsAny(t, ".*>") {
			return t, true
		}
	}
	return "", false
}

// JudgeApproveIdentity returns the identity an approval subject names, or
// false when subject is not one.
func (ns Namespace) JudgeApproveIdentity(subject string) (string, bool) {
	id, ok := strings.CutPrefix(subject, ns.subject("judge_approve"))
	if !ok || id == "" || strings.ContainsAny(id, ".*>") {
		return "", false
	}
	return id, true
}

// JudgeAnswerKey is a request's key in the answers bucket, and
// JudgeApprovalKey its key in the approvals bucket: the tenant first (see
// the topology above).
func JudgeAnswerKey(tenant, id string) string   { return tenant + "." + id }
func JudgeApprovalKey(tenant, id string) string { return tenant + "." + id }

// JudgeTenantKey is a tenant's key in the sessions bucket, for the limits
// on all its judge calls (break glass and its jobs' arbitrations) in a
// rolling window. Sessions hold no dot,
// and its middle token is not "job", so it names no session and no job.
func JudgeTenantKey(tenant string) string { return tenant + ".tenant.window" }

// JudgeSessionKey is a session's key in the sessions bucket.
func JudgeSessionKey(tenant, session string) string { return tenant + "." + session }

// JudgeJobKey is a job's key in the sessions bucket, for its
// arbitrations. Sessions and job ids hold no dot, so it never names a
// session.
func JudgeJobKey(tenant, job string) string { return tenant + ".job." + job }

// JudgeConfig sets the judge topology's durability and timing. Zero fields
// take the documented defaults.
type JudgeConfig struct {
	// Namespace of the fleet; "" is DefaultNamespace.
	Namespace Namespace
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

// JudgeTopology holds handles on the judge's stream and buckets.
type JudgeTopology struct {
	NS        Namespace
	JS        jetstream.JetStream
	Config    JudgeConfig
	Answers   jetstream.KeyValue
	Sessions  jetstream.KeyValue
	Approvals jetstream.KeyValue
}

// EnsureJudge creates the judge's streams, consumer and buckets that are
// missing, leaving existing ones as they are. Judges, break-glass clients
// and the judge's admin commands all call it; like Ensure it retries while
// the server does not answer, for up to cfg.StartupWait.
func EnsureJudge(ctx context.Context, js jetstream.JetStream, cfg JudgeConfig) (*JudgeTopology, error) {
	cfg.defaults()
	if err := cfg.Namespace.Validate(); err != nil {
		return nil, err
	}
	if cfg.Replicas < 1 || cfg.MaxDeliver < 1 || cfg.AckWait < time.Second || cfg.AnswerTTL < time.Minute || cfg.StartupWait < 0 {
		return nil, fmt.Errorf("bus: invalid judge config %+v", cfg)
	}
	return retryTransient(ctx, cfg.StartupWait, func(actx context.Context) (*JudgeTopology, error) {
		if err := checkServer(js); err != nil {
			return nil, err
		}
		return ensureJudgeOnce(actx, js, cfg)
	})
}

func ensureJudgeOnce(ctx context.Context, js jetstream.JetStream, cfg JudgeConfig) (*JudgeTopology, error) {
	ns := cfg.Namespace
	// The request streams, one a kind, each pulled by every judge through
	// its durable ConsumerJudges.
	requests := []struct {
		stream, subject, what string
		// perTenant bounds a tenant's queued requests (0: none).
		perTenant int64
	}{
		{ns.JudgeStream(), ns.subject("judge") + "*", "break-glass requests", cfg.QueuedPerTenant},
		{ns.ArbitrateStream(), ns.subject("arbitrate") + "*", "arbitration requests", 0},
	}
	var streams []jetstream.StreamConfig
	for _, r := range requests {
		streams = append(streams, jetstream.StreamConfig{
			Name:        r.stream,
			Description: "makerfleet " + r.what,
			Subjects:    []string{r.subject},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			MaxMsgSize:  cfg.MaxMsgSize,
			MaxAge:      cfg.AnswerTTL,
			Duplicates:  10 * time.Minute,
			// One subject per tenant: the server bounds each tenant's
			// queue, and a full stream refuses rather than drops.
			MaxMsgsPerSubject:    r.perTenant,
			DiscardNewPerSubject: r.perTenant > 0,
			Discard:              jetstream.DiscardNew,
			MaxBytes:             bytesFor(cfg.RequestBytes, cfg.Storage),
		})
	}
	streams = append(streams, jetstream.StreamConfig{
		Name:        ns.JudgeAuditStream(),
		Description: "makerfleet break-glass audit trail",
		Subjects:    []string{ns.subject("judge_audit") + "*.*"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     cfg.Storage,
		Replicas:    cfg.Replicas,
		MaxMsgSize:  cfg.MaxMsgSize,
		Duplicates:  10 * time.Minute,
	})
	for _, sc := range streams {
		if _, err := ensureStream(ctx, js, sc); err != nil {
			return nil, err
		}
	}
	for _, r := range requests {
		if err := ensureConsumer(ctx, js, r.stream, jetstream.ConsumerConfig{
			Durable:       ConsumerJudges,
			Description:   "every judge pulls " + r.what + " from here",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			MaxDeliver:    cfg.MaxDeliver,
			MaxAckPending: 1000,
			FilterSubject: r.subject,
		}); err != nil {
			return nil, err
		}
	}
	topo := &JudgeTopology{NS: ns, JS: js, Config: cfg}
	buckets := []struct {
		dst  *jetstream.KeyValue
		name string
		desc string
	}{
		{&topo.Answers, ns.JudgeAnswersBucket(), "makerfleet break-glass answers"},
		{&topo.Sessions, ns.JudgeSessionsBucket(), "makerfleet break-glass session limits"},
		{&topo.Approvals, ns.JudgeApprovalsBucket(), "makerfleet break-glass approvals"},
	}
	for _, b := range buckets {
		kv, err := ensureKV(ctx, js, jetstream.KeyValueConfig{
			Bucket: b.name, Description: b.desc, History: 1, TTL: cfg.AnswerTTL,
			MaxValueSize: cfg.MaxMsgSize + 64<<10, Storage: cfg.Storage, Replicas: cfg.Replicas,
		})
		if err != nil {
			return nil, err
		}
		*b.dst = kv
	}
	return topo, nil
}

// TeardownJudge deletes everything EnsureJudge created in ns. Missing ones
// are skipped.
func TeardownJudge(ctx context.Context, js jetstream.JetStream, ns Namespace) error {
	var errs []error
	for _, name := range []string{ns.JudgeStream(), ns.ArbitrateStream(), ns.JudgeAuditStream()} {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, err)
		}
	}
	for _, name := range []string{ns.JudgeAnswersBucket(), ns.JudgeSessionsBucket(), ns.JudgeApprovalsBucket()} {
		if err := js.DeleteKeyValue(ctx, name); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
