package topology

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// Topology holds handles on the fleet's shared streams and buckets.
type Topology struct {
	NS      bus.Namespace
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
	// (internal/pricetable).
	Prices jetstream.KeyValue
	// Providers is the provider registry: schemas.Deployment by name
	// (internal/providers).
	Providers jetstream.KeyValue
	// Webhooks holds the webhook deliveries (schemas.WebhookDelivery) by
	// <tenant>.<delivery id>.
	Webhooks jetstream.KeyValue
}

// handles maps each of the fleet's required buckets to its field.
func (t *Topology) handles() map[string]*jetstream.KeyValue {
	ns := t.NS
	return map[string]*jetstream.KeyValue{
		ns.StatusBucket(): &t.Status, ns.ReportsBucket(): &t.Reports,
		ns.JobsBucket(): &t.Jobs, ns.LeasesBucket(): &t.Leases, ns.TasksBucket(): &t.Tasks,
		ns.QuotasBucket(): &t.Quotas, ns.APIKeysBucket(): &t.APIKeys, ns.BatchesBucket(): &t.Batches,
		ns.PricesBucket(): &t.Prices, ns.ProvidersBucket(): &t.Providers,
		ns.WebhooksBucket(): &t.Webhooks,
	}
}

// JudgeTopology holds handles on the judge's buckets.
type JudgeTopology struct {
	NS        bus.Namespace
	JS        jetstream.JetStream
	Config    JudgeConfig
	Answers   jetstream.KeyValue
	Sessions  jetstream.KeyValue
	Approvals jetstream.KeyValue
}

// handles maps each of the judge's buckets to its field.
func (t *JudgeTopology) handles() map[string]*jetstream.KeyValue {
	ns := t.NS
	return map[string]*jetstream.KeyValue{
		ns.JudgeAnswersBucket(): &t.Answers, ns.JudgeSessionsBucket(): &t.Sessions,
		ns.JudgeApprovalsBucket(): &t.Approvals,
	}
}
