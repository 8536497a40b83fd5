package schemas

import "time"

// KindRetentionPolicy is the kind of a retention policy (bucket
// maker_retention).
const KindRetentionPolicy = "retention_policy"

// FleetRetentionKey is the retention bucket's key of the fleet-wide
// policy; a tenant's policy is under its tenant id, one job's under
// <tenant>.<job>.
const FleetRetentionKey = "_fleet"

// MaxRetentionSeconds bounds a retention age: ten years.
const MaxRetentionSeconds = 10 * 366 * 24 * 3600

// RetentionAges are how long a finished job's (or batch's) data is kept
// after it ended, in seconds, by kind. An absent field inherits the value
// of the policy above (job, then tenant, then the fleet, then the built-in
// default); 0 keeps that kind forever.
type RetentionAges struct {
	// JournalSeconds: the job's decision journal and checkpoints.
	JournalSeconds *int64 `json:"journal_seconds,omitempty" jsonschema:"minimum=0"`
	// ReportsSeconds: the job's final report.
	ReportsSeconds *int64 `json:"reports_seconds,omitempty" jsonschema:"minimum=0"`
	// RegistrySeconds: the job's registry record (its spec and state);
	// kept at least as long as the job's journal, report and status.
	RegistrySeconds *int64 `json:"registry_seconds,omitempty" jsonschema:"minimum=0"`
	// StatusSeconds: the job's last progress status.
	StatusSeconds *int64 `json:"status_seconds,omitempty" jsonschema:"minimum=0"`
	// DLQSeconds: dead letters, by the time they were stored.
	DLQSeconds *int64 `json:"dlq_seconds,omitempty" jsonschema:"minimum=0"`
	// BatchesSeconds: a finished batch's record and input lines.
	BatchesSeconds *int64 `json:"batches_seconds,omitempty" jsonschema:"minimum=0"`
}

// RetentionPolicy is how long finished work is kept: the fleet's (no
// tenant), a tenant's, or one job's (tenant and job id), stored in the
// retention bucket and applied by the coordinators' periodic sweep.
type RetentionPolicy struct {
	Header
	// Tenant names the tenant; empty for the fleet's policy.
	Tenant string `json:"tenant,omitempty"`
	// JobID names one job of Tenant; empty for the tenant's policy.
	JobID string `json:"job_id,omitempty"`
	RetentionAges
	// UpdatedAt is when the policy was last changed.
	UpdatedAt time.Time `json:"updated_at"`
}

// MessageKind implements Message.
func (*RetentionPolicy) MessageKind() string { return KindRetentionPolicy }

// Validate implements Message.
func (p *RetentionPolicy) Validate() error {
	const k = KindRetentionPolicy
	if err := p.Header.check(k); err != nil {
		return err
	}
	if p.Tenant != "" {
		if err := ValidTenant(p.Tenant); err != nil {
			return err
		}
	}
	if p.JobID != "" {
		if p.Tenant == "" {
			return invalid(k, "a job's policy names its tenant")
		}
		if err := ValidJobID(p.JobID); err != nil {
			return err
		}
	}
	a := p.RetentionAges
	for _, f := range []struct {
		name string
		v    *int64
	}{
		{"journal_seconds", a.JournalSeconds}, {"reports_seconds", a.ReportsSeconds}, {"registry_seconds", a.RegistrySeconds},
		{"status_seconds", a.StatusSeconds}, {"dlq_seconds", a.DLQSeconds}, {"batches_seconds", a.BatchesSeconds},
	} {
		if f.v != nil && (*f.v < 0 || *f.v > MaxRetentionSeconds) {
			return invalid(k, "%s must be between 0 and %d, got %d", f.name, MaxRetentionSeconds, *f.v)
		}
	}
	return nil
}
