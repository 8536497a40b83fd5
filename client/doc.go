// Package client is the Go client of a makerfleet fleet, for programs and
// the maker command line: it submits jobs and batches, reads their state,
// progress and reports, waits for them, and pauses, resumes, cancels or
// decides them. It talks to the fleet over NATS directly (the job stream,
// the registry, status and report buckets, and the coordinators' control
// service); for a fleet reached through `maker serve` over HTTP use
// package client/httpapi instead.
//
// A Client is made with Dial (it owns the connection) or New (on a
// connection the caller owns). It is safe for concurrent use. Every call
// takes a context first; a call that asks the coordinators has a default
// timeout when the context has no deadline.
//
// Jobs are named by id, in the client's tenant (WithTenant, default
// "default"), or as "tenant/id". Errors can be tested with errors.Is
// against the sentinels in errors.go (ErrNotFound, ErrInvalid,
// ErrConflict, ErrNotFinished, ...); their messages are the fleet's own.
//
// What the client reads and writes: it publishes job specs
// (schemas.JobSpec) on <ns>.v1.job.<tenant>, reads and writes job records
// (schemas.JobRecord) in the registry bucket (writes only without the
// intake-only option), reads schemas.JobStatus and schemas.JobReport from
// the status and report buckets, and sends schemas.ControlRequest and
// schemas.DecideRequest to the coordinators' control service.
package client
