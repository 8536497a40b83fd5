// Package api is the HTTP/JSON API of `maker serve`: jobs (submit, get,
// list, result, pause, resume, cancel, decide, an event stream over SSE),
// batches, tasks, usage and quotas of a fleet, for callers holding an API
// key (internal/apikey).
//
// Every keyed request acts for its key's tenant, never one a body or path
// names: another tenant's job or batch is 404, as an unknown one. An
// admin key may also use the fleet-wide views (?tenant=, quotas, task
// registration). Each key has a request rate limit (429 with
// Retry-After). Errors are RFC 9457 problem details
// (application/problem+json): 400 for a body that is not JSON, 401 for a
// missing, unknown or revoked key, 403 for a non-admin key on an admin
// route, 404, 405, 409, 413 for a body over the limit, 415, 422 for an
// invalid request (errors[] names each failing field by its JSON pointer,
// e.g. /params/disks), 429, 500, 501 and 503. A refused request enqueues
// nothing: a job is prepared and checked completely (jobs.PrepareAdmitted, and
// its forecast against budget_usd) before it is registered and queued.
//
// The server reads and writes the fleet's NATS topology: it registers
// jobs in the job registry and queues them on the job stream (subject
// <ns>.v1.job.<tenant>), reads the status, report and task buckets, sends
// control and decide requests to the coordinators
// (<ns>.v1.control.<tenant>.<job>, <ns>.v1.decide.<tenant>.<job>), and
// stores batches through internal/batch and quotas through
// internal/quota.
//
// Routes are one table (routes.go) from which both the mux and the OpenAPI
// 3.1 document (OpenAPI, docs/openapi.json) are built, with the body
// schemas generated from the schemas package's types.
package api
