// Package retention keeps the fleet's finished work for a bounded time:
// the decision journal, reports, registry records and statuses of
// finished jobs, dead letters, and finished batches' records and lines.
//
// A Policy says how long each kind is kept after a job (or batch) ended:
// built-in defaults (Defaults), overridden fleet-wide, per tenant and per
// job by schemas.RetentionPolicy records in the retention bucket
// (bus.Namespace.RetentionBucket: keys "_fleet", "<tenant>",
// "job.<tenant>.<job>"). An age of 0 keeps that kind forever: nothing grows
// without bound unless someone asked to keep it.
//
// A Sweeper removes what is past its age (Sweep) or everything of jobs
// finished before a time (Purge, `maker jobs purge --before`). It takes a
// lease first (internal/lease, key "sweep.lease" in the retention
// bucket), so coordinators sweeping at once do not do the work twice,
// renews it as it goes (every 200 items or a third of its TTL) and stops
// when it cannot (ErrLeaseLost). Every removal is conditional (a stream
// purge by subject, a KV purge at the revision read), so a sweep is
// idempotent, and a job's record is read again right before each removal
// of its data: a job id used again meanwhile is left alone. A policy
// record that cannot be read stops the sweep before anything goes: the
// defaults never stand in for a policy that may say "keep". It never touches a job
// that is not finished (queued, running, paused, budget_exhausted), nor a
// job of a batch still running.
//
// It reads the job registry (maker_jobs) and the batches bucket, and
// removes: journal subjects (<ns>.v1.journal.<tenant>.<job>.*, a stream
// purge), report, status, registry and lease keys, dead letters
// (<ns>.v1.dlq.<tenant>.<job>, a purge below the first one to keep) and
// batch records, their lease keys and lines (<ns>.v1.batch.<tenant>.<batch>).
package retention
