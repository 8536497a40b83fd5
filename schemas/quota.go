package schemas

import "time"

// KindTenantQuota is the kind of a tenant's quotas (bucket maker_quotas).
const KindTenantQuota = "tenant_quota"

// FleetQuotaKey is the quota bucket's key of the fleet-wide limits; a
// tenant's quotas are under its tenant id (tenant ids never hold a dot or
// an underscore).
const FleetQuotaKey = "_fleet"

// TenantQuota is what one tenant may use of the fleet, stored in the quota
// bucket under its tenant id and read live by every coordinator (a change
// applies within a second, without restarts). Zero in a limit means no
// limit. Under FleetQuotaKey, Tenant is empty and the limits are the whole
// fleet's (MaxInflightSamples: what the voters can answer at once, shared
// out weighted-fair among the tenants that want more).
type TenantQuota struct {
	Header
	// Tenant names the tenant; empty for the fleet's record.
	Tenant string `json:"tenant,omitempty"`
	// MaxRunningJobs caps the tenant's jobs running at once, fleet-wide.
	MaxRunningJobs int `json:"max_running_jobs,omitempty" jsonschema:"minimum=0"`
	// MaxInflightSamples caps its sample requests published and not yet
	// answered, fleet-wide.
	MaxInflightSamples int `json:"max_inflight_samples,omitempty" jsonschema:"minimum=0"`
	// SamplesPerSecond is the rate of its sample requests (one token
	// bucket in Redis shared by every coordinator); Burst the bucket's
	// size (default: one second's worth, at least 1).
	SamplesPerSecond float64 `json:"samples_per_second,omitempty" jsonschema:"minimum=0"`
	Burst            int     `json:"burst,omitempty" jsonschema:"minimum=0"`
	// SpendPerDayUSD caps what its jobs spend per UTC day, in US dollars.
	SpendPerDayUSD float64 `json:"spend_per_day_usd,omitempty" jsonschema:"minimum=0"`
	// Weight is the tenant's share of a contended fleet relative to other
	// tenants' (default 1).
	Weight float64 `json:"weight,omitempty" jsonschema:"minimum=0"`
	// UpdatedAt is when the record was last changed.
	UpdatedAt time.Time `json:"updated_at"`
}

// Quota bounds.
const (
	maxQuotaCount  = 1_000_000
	maxQuotaRate   = 1_000_000
	maxQuotaWeight = 1000
)

// MessageKind implements Message.
func (*TenantQuota) MessageKind() string { return KindTenantQuota }

// Validate implements Message.
func (q *TenantQuota) Validate() error {
	const k = KindTenantQuota
	if err := q.Header.check(k); err != nil {
		return err
	}
	if q.Tenant != "" {
		if err := ValidTenant(q.Tenant); err != nil {
			return err
		}
	}
	if q.MaxRunningJobs < 0 || q.MaxRunningJobs > maxQuotaCount || q.MaxInflightSamples < 0 || q.MaxInflightSamples > maxQuotaCount ||
		q.Burst < 0 || q.Burst > maxQuotaCount {
		return invalid(k, "max_running_jobs, max_inflight_samples and burst must be between 0 and %d", maxQuotaCount)
	}
	if !inRange(q.SamplesPerSecond, 0, maxQuotaRate) {
		return invalid(k, "samples_per_second must be between 0 and %d, got %v", maxQuotaRate, q.SamplesPerSecond)
	}
	if !inRange(q.SpendPerDayUSD, 0, MaxBudgetUSD) {
		return invalid(k, "spend_per_day_usd must be between 0 and %d, got %v", MaxBudgetUSD, q.SpendPerDayUSD)
	}
	if !inRange(q.Weight, 0, maxQuotaWeight) {
		return invalid(k, "weight must be between 0 and %d, got %v", maxQuotaWeight, q.Weight)
	}
	return nil
}

// EffectiveWeight is Weight, 1 when unset.
func (q TenantQuota) EffectiveWeight() float64 {
	if q.Weight == 0 {
		return 1
	}
	return q.Weight
}

// EffectiveBurst is Burst, or one second of SamplesPerSecond (at least 1)
// when unset.
func (q TenantQuota) EffectiveBurst() int {
	if q.Burst > 0 {
		return q.Burst
	}
	return max(1, int(q.SamplesPerSecond+0.999999))
}
