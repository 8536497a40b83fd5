// Package quota is what a tenant may use of the fleet, and the accounting
// every coordinator shares to hold it to that.
//
// Limits are schemas.TenantQuota records in the quota bucket (maker_quotas):
// one per tenant under its id and the fleet's under schemas.FleetQuotaKey.
// Store reads them through a watch-fed cache, so a change applies within a
// second in every coordinator, without restarts.
//
// The shared counters live in Redis, each changed by one embedded Lua
// script with the server's clock (TIME), so several coordinators see one
// figure:
//   - Limiter (limiter.go): a token bucket per tenant (samples per second),
//     the samples each tenant has in flight (a ZSET scored by expiry: a
//     dead coordinator's entries lapse), the fleet's in-flight capacity
//     shared weighted-fair among the tenants that want more, priorities
//     within a tenant, and the running jobs per tenant (a ZSET of job keys
//     scored by lease expiry).
//   - Budgets (budget.go): reserve-then-dispatch money per job and per
//     tenant-day, in integer nano-dollars (a job's forecast, what Admit
//     holds a budget to, is internal/pricing's Forecast).
//
// The coordinator calls the limiter before it publishes sample requests
// (coordinator/admit.go) and before it takes a job (coordinator/schedule.go);
// the API server and `maker quota` read and write the records.
package quota
