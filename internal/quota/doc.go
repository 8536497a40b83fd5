// Package quota is what a tenant may use of the fleet: the tenant quota
// records and the watch-fed cache every coordinator and the API read.
//
// Limits are schemas.TenantQuota records in the quota bucket (maker_quotas):
// one per tenant under its id and the fleet's under schemas.FleetQuotaKey.
// Store reads them through a watch-fed cache, so a change applies within a
// second in every coordinator, without restarts.
//
// What enforces them is in Redis and lives with the rest of the Redis code
// in internal/store: the Limiter (token buckets, samples in flight, the
// fleet's capacity shared weighted-fair, priorities, running jobs) and the
// Budgets (reserve, settle, claim), each counter changed by one Lua
// script with the server's clock.
//
// The coordinator calls the limiter before it publishes sample requests
// (coordinator/admit.go) and before it takes a job (coordinator/schedule.go);
// the API server and `maker quota` read and write the records.
package quota
