package bus

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/makerfleet/makerfleet/schemas"
)

// The names of one fleet's streams, buckets, subjects and consumers.

// Namespace names one fleet's streams, buckets and subjects on a NATS
// server: fleets in different namespaces share nothing. The empty
// Namespace is DefaultNamespace.
type Namespace string

// DefaultNamespace is the fleet every role joins unless told otherwise:
// streams MAKER_*, buckets maker_*, subjects maker.v1.*.
const DefaultNamespace Namespace = "maker"

var namespaceRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// Validate checks ns: 1-32 of a-z, 0-9 and '-', starting with a letter.
func (ns Namespace) Validate() error {
	if ns != "" && !namespaceRE.MatchString(string(ns)) {
		return fmt.Errorf("bus: namespace %q must be 1-32 characters of a-z, 0-9 and '-', starting with a letter", string(ns))
	}
	return nil
}

func (ns Namespace) String() string {
	if ns == "" {
		return string(DefaultNamespace)
	}
	return string(ns)
}

func (ns Namespace) stream(kind string) string {
	return strings.ToUpper(strings.ReplaceAll(ns.String(), "-", "_")) + "_" + kind
}

// JobsStream, SamplesStream, ResultsStream, JournalStream and DLQStream
// name the namespace's streams.
func (ns Namespace) JobsStream() string    { return ns.stream("JOBS") }
func (ns Namespace) SamplesStream() string { return ns.stream("SAMPLES") }
func (ns Namespace) ResultsStream() string { return ns.stream("RESULTS") }
func (ns Namespace) JournalStream() string { return ns.stream("JOURNAL") }
func (ns Namespace) DLQStream() string     { return ns.stream("DLQ") }

func (ns Namespace) bucket(kind string) string {
	return strings.ReplaceAll(ns.String(), "-", "_") + "_" + kind
}

// StatusBucket, ReportsBucket, JobsBucket and LeasesBucket name the
// namespace's KV buckets.
func (ns Namespace) StatusBucket() string  { return ns.bucket("status") }
func (ns Namespace) ReportsBucket() string { return ns.bucket("reports") }
func (ns Namespace) JobsBucket() string    { return ns.bucket("jobs") }
func (ns Namespace) LeasesBucket() string  { return ns.bucket("leases") }

// TasksBucket names the namespace's task registry bucket.
func (ns Namespace) TasksBucket() string { return ns.bucket("tasks") }

// QuotasBucket, APIKeysBucket and BatchesBucket name the buckets of the
// tenants' quotas, the API keys (hashed) and the batch records.
func (ns Namespace) QuotasBucket() string  { return ns.bucket("quotas") }
func (ns Namespace) APIKeysBucket() string { return ns.bucket("apikeys") }
func (ns Namespace) BatchesBucket() string { return ns.bucket("batches") }

// PricesBucket holds the fleet's price table (schemas.ModelPrice): what
// each model's tokens cost, by model, and the default record
// (internal/pricetable). Only the operator writes it.
func (ns Namespace) PricesBucket() string { return ns.bucket("prices") }

// ProvidersBucket holds the provider registry (schemas.Deployment): where
// each model is served, at what limits (internal/providers). Only the
// operator writes it; voters read it.
func (ns Namespace) ProvidersBucket() string { return ns.bucket("providers") }

// InputsBucket is the object store of jobs' params kept by reference
// (internal/inputs), named by their content.
func (ns Namespace) InputsBucket() string { return ns.bucket("inputs") }

// RetentionBucket holds the retention policies (schemas.RetentionPolicy):
// the fleet's, tenants' and jobs' (internal/retention).
func (ns Namespace) RetentionBucket() string { return ns.bucket("retention") }

// CalibrationsBucket holds models' calibrations (schemas.Calibration):
// fleet-wide facts about a model on a task, by task, model and prompt
// version (internal/calibrate).
func (ns Namespace) CalibrationsBucket() string { return ns.bucket("calibrations") }

// PresenceBucket holds the voters' and coordinators' presence records
// (schemas.VoterPresence under voter.<id>, schemas.CoordinatorPresence
// under coordinator.<id>), each forgotten when its writer stops renewing
// it (internal/presence).
func (ns Namespace) PresenceBucket() string { return ns.bucket("presence") }

// BatchesStream holds batches' input lines, one message per line.
func (ns Namespace) BatchesStream() string { return ns.stream("BATCHES") }

// BatchSubject is the subject of one batch's input lines.
func (ns Namespace) BatchSubject(tenant, batch string) string {
	return ns.subject("batch") + tenant + "." + batch
}

func (ns Namespace) subject(kind string) string { return ns.String() + ".v1." + kind + "." }

// StreamSubjects is the subject filter of a stream of kind's subjects,
// those with tokens tokens after the kind: StreamSubjects("sample", 2) is
// maker.v1.sample.*.* (<tenant>.<job>).
func (ns Namespace) StreamSubjects(kind string, tokens int) string {
	return ns.subject(kind) + strings.Repeat("*.", tokens-1) + "*"
}

// JobSubject is where jobs of tenant are submitted.
func (ns Namespace) JobSubject(tenant string) string { return ns.subject("job") + tenant }

// SampleSubject is where a job's sample requests go.
func (ns Namespace) SampleSubject(tenant, job string) string {
	return ns.subject("sample") + tenant + "." + job
}

// ResultSubject is where a job's sample results go: those of requests
// published under lease generation gen (schemas.EpochGen of the request's
// epoch), so each owner reads only its own.
func (ns Namespace) ResultSubject(tenant, job string, gen int64) string {
	return ns.subject("result") + tenant + "." + job + "." + strconv.FormatInt(gen, 10)
}

// ResultJobWildcard matches a job's results of every generation.
func (ns Namespace) ResultJobWildcard(tenant, job string) string {
	return ns.subject("result") + tenant + "." + job + ".*"
}

// JournalSubject holds a job's decisions and takeovers; CheckpointSubject
// its checkpoints.
func (ns Namespace) JournalSubject(tenant, job string) string {
	return ns.subject("journal") + tenant + "." + job + ".d"
}
func (ns Namespace) CheckpointSubject(tenant, job string) string {
	return ns.subject("journal") + tenant + "." + job + ".c"
}

// DLQSubject holds a job's dead letters; DLQWildcard every job's.
func (ns Namespace) DLQSubject(tenant, job string) string {
	return ns.subject("dlq") + tenant + "." + job
}
func (ns Namespace) DLQWildcard() string { return ns.subject("dlq") + ">" }

// DecidedSubject carries a job's step-decided events.
func (ns Namespace) DecidedSubject(tenant, job string) string {
	return ns.subject("decided") + tenant + "." + job
}

// DecidedWildcard matches every job's step-decided events.
func (ns Namespace) DecidedWildcard() string { return ns.subject("decided") + ">" }

// Names of the shared durable consumers (one per stream, so not
// namespaced).
const (
	ConsumerVoters       = "voters"
	ConsumerCoordinators = "coordinators"
)

// ResultConsumer is the durable name of a job's result consumer for lease
// generation gen. Tenants hold no '_', so the name is unambiguous.
func ResultConsumer(tenant, job string, gen int64) string {
	return ResultConsumerPrefix(tenant, job) + strconv.FormatInt(gen, 10)
}

// ResultConsumerPrefix starts the names of every result consumer of a job.
func ResultConsumerPrefix(tenant, job string) string { return "res_" + tenant + "_" + job + "_g" }

// JobKey is a job's key in the status and report buckets.
func JobKey(tenant, job string) string { return tenant + "." + job }

// SplitJobKey returns the tenant and the rest of a key <tenant>.<rest>
// (JobKey, a batch record's key); ok is false when its first part is no
// tenant. The key, which the server's permissions scope, says whose a
// record is; what the record's body says is checked against it.
func SplitJobKey(key string) (tenant, rest string, ok bool) {
	tenant, rest, ok = strings.Cut(key, ".")
	return tenant, rest, ok && schemas.ValidTenant(tenant) == nil
}

// SafeKey is name as one token of a KV key: as it is when it is a plain
// token (1-64 of A-Z, a-z, 0-9, '_' and '-'), else its plain characters (at
// most 40, others as '_'), '=' and 12 hex digits of its SHA-256. Any name
// (dots, slashes, spaces, control characters, a long one) gives a valid
// token, and two names never share one ('=' marks a hashed name and is
// never in a plain one). Readers check the record under a key names what
// they asked for: a hash could in principle be another name's.
func SafeKey(name string) string {
	if plainKey.MatchString(name) {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		if b.Len() >= 40 {
			break
		}
		if r < 0x80 && (r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(name))
	return b.String() + "=" + hex.EncodeToString(sum[:6])
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Covers reports whether subject filter f matches every subject filter
// want matches.
func Covers(f, want string) bool {
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

// The judge's names. Every key of the judge's buckets starts with the
// tenant the request's subject names, so that a server's permissions can
// let tenant T read only keys T.> (internal/topology has the whole
// picture).

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

// WebhooksStream is the work queue of webhook deliveries to make
// (schemas.WebhookTask), on WebhookSubject: whoever ends a job or a batch
// publishes, `maker serve` pulls (ConsumerWebhooks).
func (ns Namespace) WebhooksStream() string { return ns.stream("WEBHOOKS") }

// WebhookSubject is where the delivery id of tenant's event is queued.
func (ns Namespace) WebhookSubject(tenant, id string) string {
	return ns.subject("webhook") + tenant + "." + id
}

// WebhooksBucket holds the webhook deliveries' records
// (schemas.WebhookDelivery) under <tenant>.<delivery id>.
func (ns Namespace) WebhooksBucket() string { return ns.bucket("webhooks") }

// ConsumerWebhooks is the durable consumer every `maker serve` pulls
// webhook deliveries from.
const ConsumerWebhooks = "webhooks"
