// Package auth gives each part of a fleet an identity of its own on NATS
// and the least privilege it needs there: "the subject proves the
// identity". `maker auth init` (Init) writes one nkey seed per identity
// and a nats-server authorization block (auth.conf) granting each its
// publish and subscribe permissions (PermissionsOf); the server then refuses
// everything else, so a message's subject tells who could have sent it.
//
// Identities (Roles, then one per tenant):
//
//	coordinator   runs jobs: the topology, samples, journal, decisions,
//	              registry, status, reports, leases; serves controls,
//	              decisions and dead-letter replays (an admin key's, asked
//	              by maker serve); reads quotas and prices. Never publishes a
//	              result, never writes a quota, price or API key.
//	voter         pulls sample requests, publishes results and dead
//	              letters, reads the task registry, hears step-decided.
//	judge         the break-glass and arbitration streams and buckets.
//	approver      a person: decides steps waiting for one, approves held
//	              judge calls; reads every job's registry, status, report.
//	api           `maker serve`, acting for every tenant whose API key it
//	              checked: registers and queues jobs, asks controls,
//	              decisions and dead-letter replays (a coordinator replays:
//	              the api issues no sample request), reads jobs, tasks, quotas, prices and API
//	              keys, keeps batches; writes quotas, prices and task specs
//	              (admin keys' routes); delivers webhooks (pulls the
//	              webhook stream, writes the webhooks bucket). Never a
//	              status, report, lease or API key.
//	admin         the operator: everything (the only one to write the
//	              retention policies and the models' calibrations).
//
// Tenants have no NATS identity: they reach the fleet only through
// `maker serve` and its clients (HTTP, API keys), which acts for the
// key's tenant as the api identity. The bus is the fleet's private
// network, so nothing a tenant does can take a shared NATS resource
// (consumers, stream bytes) that the api does not bound per tenant
// (docs/security.md, "Tenants come in through maker serve").
//
// Every identity reads replies only under its own inbox prefix,
// _INBOX.<identity> (bus.Auth sets it), so nobody reads another's replies.
package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// The identities of a fleet.
const (
	Coordinator = "coordinator"
	Voter       = "voter"
	Judge       = "judge"
	Admin       = "admin"
	Approver    = "approver"
	API         = "api"
)

// Roles are every identity, in the order auth.conf lists them.
var Roles = []string{Coordinator, Voter, Judge, Approver, API, Admin}

// formerTenantPrefix started the seed files of the tenant identities
// earlier releases made (tenant-<T>.nk); Init reports any it finds.
const formerTenantPrefix = "tenant-"

// ErrIdentity: a name that is none of the identities.
var ErrIdentity = errors.New("auth: unknown identity")

// Rules are subject filters a client may (Allow) and may not (Deny) use;
// Deny wins over Allow.
type Rules struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Permissions are what an identity may publish and subscribe to.
// AllowResponses lets it answer requests it received (the control and
// decide services), whatever their reply subject.
type Permissions struct {
	Publish        Rules `json:"publish"`
	Subscribe      Rules `json:"subscribe"`
	AllowResponses bool  `json:"allow_responses,omitempty"`
}

// ValidIdentity checks that id is one of the Roles.
func ValidIdentity(id string) error {
	if slices.Contains(Roles, id) {
		return nil
	}
	if strings.HasPrefix(id, formerTenantPrefix) {
		return fmt.Errorf("%w %q: tenants have no NATS identity; they use maker serve with an API key (maker keys create --tenant T)", ErrIdentity, id)
	}
	return fmt.Errorf("%w %q: one of %s", ErrIdentity, id, strings.Join(Roles, ", "))
}

// names are the subjects and JetStream API subjects of one namespace.
type names struct{ ns bus.Namespace }

func (n names) subj(kind string) string { return n.ns.String() + ".v1." + kind + "." }

// fleetStreams are the fleet's streams; fleetBuckets its buckets: what
// topology.Open binds.
func (n names) fleetStreams() []string {
	return []string{n.ns.JobsStream(), n.ns.SamplesStream(), n.ns.ResultsStream(), n.ns.JournalStream(), n.ns.DLQStream(), n.ns.BatchesStream(),
		n.ns.WebhooksStream()}
}

func (n names) fleetBuckets() []string {
	return []string{n.ns.JobsBucket(), n.ns.StatusBucket(), n.ns.ReportsBucket(), n.ns.LeasesBucket(), n.ns.TasksBucket(),
		n.ns.QuotasBucket(), n.ns.APIKeysBucket(), n.ns.BatchesBucket(), n.ns.PricesBucket(), n.ns.ProvidersBucket(),
		n.ns.WebhooksBucket()}
}

// guarded are the buckets only the admin (and, for quotas, prices and
// task specs, the api) writes: quotas and API keys decide what a tenant
// may do, the price table what its work costs, the task registry what a
// job runs, the provider registry where voters send their keys.
func (n names) guarded() []string {
	return []string{n.ns.TasksBucket(), n.ns.QuotasBucket(), n.ns.APIKeysBucket(), n.ns.PricesBucket(), n.ns.ProvidersBucket()}
}

// readCalibrations lets a client read the models' calibrations
// (internal/calibrate: plan and forecasts take p from them); only the
// admin writes them.
func (n names) readCalibrations() []string {
	b := n.ns.CalibrationsBucket()
	return append(info(nil, []string{b}), kvRead(b, ">")...)
}

func (n names) judgeStreams() []string {
	return []string{n.ns.JudgeStream(), n.ns.ArbitrateStream(), n.ns.JudgeAuditStream()}
}

func (n names) judgeBuckets() []string {
	return []string{n.ns.JudgeAnswersBucket(), n.ns.JudgeSessionsBucket(), n.ns.JudgeApprovalsBucket()}
}

func kvStream(bucket string) string { return "KV_" + bucket }

// info lets a client bind streams and buckets and look at their durable
// consumers: what topology.Open, topology.Ensure on an existing topology and
// js.KeyValue do. Read-only.
func info(streams, buckets []string) []string {
	var out []string
	for _, s := range streams {
		out = append(out, "$JS.API.STREAM.INFO."+s, "$JS.API.CONSUMER.INFO."+s+".*")
	}
	for _, b := range buckets {
		out = append(out, "$JS.API.STREAM.INFO."+kvStream(b))
	}
	return out
}

// kvRead lets a client get and watch the keys of bucket that keyFilter
// matches ("alpha.>", ">"): direct gets by key, and ordered consumers
// (watchers, key listings) whose filter the server checks against the
// subject (a filtered create names its filter in the subject).
func kvRead(bucket, keyFilter string) []string {
	s, k := kvStream(bucket), "$KV."+bucket+"."+keyFilter
	return []string{
		"$JS.API.DIRECT.GET." + s + "." + k,
		"$JS.API.CONSUMER.CREATE." + s + ".*." + k,
		// A watcher deletes its consumer when stopped. Consumer names are
		// random, so another's is not found by guessing.
		"$JS.API.CONSUMER.DELETE." + s + ".*",
		"$JS.FC." + s + ".>",
	}
}

// streamRead lets a client read a stream's messages whose subject filter
// matches, with ordered consumers (bus.ReadOrdered).
func streamRead(stream, filter string) []string {
	return []string{
		"$JS.API.CONSUMER.CREATE." + stream + ".*." + filter,
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.API.CONSUMER.DELETE." + stream + ".*",
	}
}

// objRead lets a client read an object store: bind it, look an object
// up, and read its chunks through an ordered consumer. Content-addressed
// objects are checked by their reader, so reading is all a reader needs.
func objRead(bucket string) []string {
	s := "OBJ_" + bucket
	return []string{
		"$JS.API.STREAM.INFO." + s,
		"$JS.API.DIRECT.GET." + s + ".$O." + bucket + ".M.>",
		"$JS.API.STREAM.MSG.GET." + s,
		"$JS.API.CONSUMER.CREATE." + s,
		"$JS.API.CONSUMER.CREATE." + s + ".>",
		"$JS.API.CONSUMER.DELETE." + s + ".*",
		"$JS.FC." + s + ".>",
	}
}

// objWrite lets a client read and write an object store's objects (and
// purge the chunks an object it replaces leaves), not change or delete
// the store.
func objWrite(bucket string) []string {
	return append(objRead(bucket), "$O."+bucket+".>", "$JS.API.STREAM.PURGE.OBJ_"+bucket)
}

// presenceWrite lets a client bind the presence bucket and put and
// delete the records under role's keys (<role>.<id>), no other.
func presenceWrite(ns bus.Namespace, role string) []string {
	b := ns.PresenceBucket()
	return []string{"$JS.API.STREAM.INFO." + kvStream(b), "$KV." + b + "." + role + ".>"}
}

// pull lets a client pull from and ack the durable consumer of a stream.
func pull(stream, durable string) []string {
	return []string{
		"$JS.API.CONSUMER.MSG.NEXT." + stream + "." + durable,
		"$JS.ACK." + stream + "." + durable + ".>",
	}
}

// ownStreams lets a client make streams (and buckets' streams) by name
// and use them: create when missing and look at them, read their
// messages, manage their consumers, ack. Not update, purge or delete: a
// stream's config could republish its messages under any subject, and
// only the admin (and the coordinator, trusted with the fleet) may change
// one that exists.
func ownStreams(stream string) []string {
	return []string{
		"$JS.API.STREAM.CREATE." + stream,
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.CONSUMER.*." + stream,
		"$JS.API.CONSUMER.*." + stream + ".>",
		"$JS.API.CONSUMER.*.*." + stream + ".>",
		"$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.DIRECT.GET." + stream,
		"$JS.ACK." + stream + ".>",
		"$JS.FC." + stream + ".>",
	}
}

// PermissionsOf returns what identity may do on NATS in namespace ns.
func PermissionsOf(ns bus.Namespace, identity string) (Permissions, error) {
	if err := ValidIdentity(identity); err != nil {
		return Permissions{}, err
	}
	n := names{ns}
	inbox := "_INBOX." + identity + ".>"
	var p Permissions
	switch identity {
	case Admin:
		p.Publish.Allow = []string{">"}
		p.Subscribe.Allow = []string{">"}
		p.AllowResponses = true
		return p, nil

	case Coordinator:
		// The fleet's topology and everything of a job's run, but no
		// result (only voters'), no break-glass request (only tenants'),
		// no approval (only approvers'), and nothing the judge keeps.
		p.Publish.Allow = []string{
			"$JS.API.>", "$JS.ACK.>", "$JS.FC.>",
			n.subj("job") + "*",
			n.subj("sample") + ">",
			n.subj("journal") + ">",
			n.subj("dlq") + ">",
			n.subj("decided") + ">",
			n.subj("arbitrate") + "*",
			// A job's or batch's end, for maker serve to deliver.
			n.subj("webhook") + "*.*",
		}
		// Every fleet bucket but the guarded ones (task registry, quotas,
		// API keys, prices), which only the admin writes (maker task
		// register, maker quota set, maker keys, maker prices); and
		// batches' lines (the batch runner runs in the coordinators).
		for _, b := range n.fleetBuckets() {
			if !slices.Contains(n.guarded(), b) {
				p.Publish.Allow = append(p.Publish.Allow, "$KV."+b+".>")
			}
		}
		p.Publish.Allow = append(p.Publish.Allow, n.subj("batch")+">")
		// The inputs store: params by reference, stored by the batch
		// runner and refreshed when a job is taken.
		p.Publish.Allow = append(p.Publish.Allow, objWrite(n.ns.InputsBucket())...)
		// The retention sweep's lease (internal/retention); the policies
		// themselves are the admin's.
		p.Publish.Allow = append(p.Publish.Allow, "$KV."+n.ns.RetentionBucket()+".sweep.lease")
		// Its own presence record (internal/presence), never a voter's.
		p.Publish.Allow = append(p.Publish.Allow, presenceWrite(n.ns, "coordinator")...)
		p.Publish.Deny = []string{n.subj("result") + ">", n.subj("judge") + ">", n.subj("judge_approve") + ">",
			"$KV." + n.ns.PresenceBucket() + ".voter.>"}
		// It creates the quota, API key, price and provider buckets (topology.Ensure)
		// and may raise their replicas, but never writes, purges or
		// deletes them: the prices it bills by are the operator's.
		for _, b := range []string{n.ns.QuotasBucket(), n.ns.APIKeysBucket(), n.ns.PricesBucket(), n.ns.ProvidersBucket()} {
			p.Publish.Deny = append(p.Publish.Deny, "$KV."+b+".>")
			for _, op := range []string{"DELETE", "PURGE", "MSG.DELETE"} {
				p.Publish.Deny = append(p.Publish.Deny, "$JS.API.STREAM."+op+"."+kvStream(b))
			}
		}
		for _, b := range n.judgeBuckets() {
			p.Publish.Deny = append(p.Publish.Deny, "$KV."+b+".>")
			for _, op := range []string{"UPDATE", "DELETE", "PURGE"} {
				p.Publish.Deny = append(p.Publish.Deny, "$JS.API.STREAM."+op+"."+kvStream(b))
			}
			p.Publish.Deny = append(p.Publish.Deny, "$JS.API.STREAM.MSG.DELETE."+kvStream(b))
		}
		p.Subscribe.Allow = []string{
			inbox,
			n.subj("control") + ">",
			n.subj("decide") + ">",
			n.subj("decided") + ">",
			// maker serve's dead-letter replays (POST /v1/dlq/replay): a
			// replay publishes sample requests, which the api may not.
			n.ns.DLQReplaySubject(),
			"$JS.EVENT.ADVISORY.>",
		}
		p.AllowResponses = true

	case Voter:
		p.Publish.Allow = append(info(n.fleetStreams(), n.fleetBuckets()),
			n.subj("result")+">",
			n.subj("dlq")+">",
		)
		p.Publish.Allow = append(p.Publish.Allow, pull(n.ns.SamplesStream(), bus.ConsumerVoters)...)
		p.Publish.Allow = append(p.Publish.Allow, kvRead(n.ns.TasksBucket(), ">")...)
		// The provider registry: which deployments serve its models
		// (read, and watched for changes; never written).
		p.Publish.Allow = append(p.Publish.Allow, kvRead(n.ns.ProvidersBucket(), ">")...)
		// Jobs' params kept by reference: read, never written.
		p.Publish.Allow = append(p.Publish.Allow, objRead(n.ns.InputsBucket())...)
		// Its presence record (internal/presence): voter.<id> keys only.
		// Voters share one identity, so one voter could write another
		// voter's record: a record is a claim, informational only.
		p.Publish.Allow = append(p.Publish.Allow, presenceWrite(n.ns, "voter")...)
		p.Subscribe.Allow = []string{inbox, n.subj("decided") + ">"}

	case Judge:
		for _, s := range n.judgeStreams() {
			p.Publish.Allow = append(p.Publish.Allow, ownStreams(s)...)
		}
		for _, b := range n.judgeBuckets() {
			p.Publish.Allow = append(p.Publish.Allow, ownStreams(kvStream(b))...)
			p.Publish.Allow = append(p.Publish.Allow, "$KV."+b+".>")
		}
		// Making a bucket reads the account's limits. An approved held
		// call is re-published by the judge itself, on the requester's
		// subject (the tenant's break glass, or the coordinator's
		// arbitration), so that a judge runs it without the hold.
		p.Publish.Allow = append(p.Publish.Allow, n.subj("judge_audit")+">", "$JS.API.INFO",
			n.subj("judge")+"*", n.subj("arbitrate")+"*")
		p.Subscribe.Allow = []string{inbox, n.subj("judge_approve") + ">"}
		p.AllowResponses = true

	case Approver:
		p.Publish.Allow = append(info(append(n.fleetStreams(), n.judgeStreams()...), append(n.fleetBuckets(), n.judgeBuckets()...)),
			n.subj("decide")+"*.*",
			n.subj("judge_approve")+Approver,
		)
		for _, b := range []string{n.ns.JobsBucket(), n.ns.StatusBucket(), n.ns.ReportsBucket(), n.ns.TasksBucket(),
			n.ns.JudgeApprovalsBucket(), n.ns.JudgeAnswersBucket()} {
			p.Publish.Allow = append(p.Publish.Allow, kvRead(b, ">")...)
		}
		p.Publish.Allow = append(p.Publish.Allow, n.readCalibrations()...)
		p.Subscribe.Allow = []string{inbox}

	case API:
		// maker serve checks each request's API key and acts for its
		// tenant, the only way tenants reach the fleet: it registers and
		// queues jobs (so a job is readable as soon as its submit is
		// answered), asks controls and a person's decisions (the registry
		// is its fallback when no coordinator answers, as for the CLI),
		// asks the judge for break glass, reads every tenant's jobs, dead
		// letters, judge answers, tasks, quotas, prices and keys, and keeps
		// the batches. Admin keys' routes write quotas, prices and task
		// specs. No status, report, lease or API key write; no topology.
		p.Publish.Allow = append(info(append(n.fleetStreams(), n.judgeStreams()...), append(n.fleetBuckets(), n.judgeBuckets()...)),
			n.subj("job")+"*",
			n.subj("control")+"*.*",
			n.subj("decide")+"*.*",
			n.subj("batch")+"*.*",
			n.subj("judge")+"*",
			// An admin key's dead-letter replay, asked of the
			// coordinators (they publish the sample requests).
			n.ns.DLQReplaySubject(),
			// Webhook deliveries: queued for a batch that ends at once,
			// pulled and made, every attempt recorded.
			n.subj("webhook")+"*.*",
		)
		p.Publish.Allow = append(p.Publish.Allow, pull(n.ns.WebhooksStream(), bus.ConsumerWebhooks)...)
		for _, b := range n.fleetBuckets() {
			if b != n.ns.LeasesBucket() {
				p.Publish.Allow = append(p.Publish.Allow, kvRead(b, ">")...)
			}
		}
		p.Publish.Allow = append(p.Publish.Allow, kvRead(n.ns.JudgeAnswersBucket(), ">")...)
		for _, b := range []string{n.ns.JobsBucket(), n.ns.QuotasBucket(), n.ns.TasksBucket(), n.ns.BatchesBucket(), n.ns.PricesBucket(), n.ns.WebhooksBucket()} {
			p.Publish.Allow = append(p.Publish.Allow, "$KV."+b+".>")
		}
		p.Publish.Allow = append(p.Publish.Allow, n.readCalibrations()...)
		// The fleet view (GET /v1/fleet): the presence records, read.
		p.Publish.Allow = append(p.Publish.Allow, info(nil, []string{n.ns.PresenceBucket()})...)
		p.Publish.Allow = append(p.Publish.Allow, kvRead(n.ns.PresenceBucket(), ">")...)
		// Tenants' big params, stored by reference at submit.
		p.Publish.Allow = append(p.Publish.Allow, objWrite(n.ns.InputsBucket())...)
		p.Publish.Allow = append(p.Publish.Allow, streamRead(n.ns.DLQStream(), n.subj("dlq")+">")...)
		// The dashboard's step feed (GET /v1/jobs/{id}/steps): a job's
		// decisions, through ordered consumers filtered on its subject
		// (never its checkpoints, no message get of the whole journal).
		p.Publish.Allow = append(p.Publish.Allow, streamRead(n.ns.JournalStream(), n.subj("journal")+"*.*.d")...)
		// A batch's lines: read in order, or one by one; a batch refused
		// after its lines were stored is purged.
		bs := n.ns.BatchesStream()
		p.Publish.Allow = append(p.Publish.Allow, streamRead(bs, ">")...)
		p.Publish.Allow = append(p.Publish.Allow,
			"$JS.API.CONSUMER.CREATE."+bs+".*",
			"$JS.API.STREAM.MSG.GET."+bs,
			"$JS.API.DIRECT.GET."+bs, "$JS.API.DIRECT.GET."+bs+".>",
			"$JS.API.STREAM.PURGE."+bs,
			"$JS.FC."+bs+".>",
		)
		p.Subscribe.Allow = []string{inbox}
	}
	return p, nil
}
