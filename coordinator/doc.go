// Package coordinator runs MAKER jobs: for each job it drives the step loop,
// asking voters for samples and deciding each step by first-to-ahead-by-k
// voting, tallied atomically in Redis.
//
// Consumes (names of the default namespace; see bus.Namespace):
//   - job specs (schemas.JobSpec) from stream MAKER_JOBS through the durable
//     consumer "coordinators", shared by every coordinator replica; each is
//     moved into the job registry (KV maker_jobs) and acked;
//   - the registry itself (a KV watch): every coordinator takes the lease
//     (KV maker_leases, internal/lease) of unfinished jobs without a live
//     owner and runs them, resuming from the job's journal;
//   - sample results (schemas.SampleResult) of each running job from stream
//     MAKER_RESULTS, through a durable consumer per job and lease
//     generation. Before anything else reads a result, its token is checked
//     against its sample id (a forged one is dropped and counted) and its
//     token counts are bounded by what its request allows;
//   - the server's max-deliveries advisories for the voters' consumer, to
//     move poison requests to the dead-letter stream (MAKER_DLQ).
//   - people's requests, core request/reply in the queue group
//     "coordinators" (one coordinator answers each; control.go):
//     schemas.ControlRequest (pause, resume, cancel) on
//     maker.v1.control.<tenant>.<job> and schemas.DecideRequest (a person's
//     answer for a step) on maker.v1.decide.<tenant>.<job>, the job named
//     by the subject only; each is checked against the job's registry
//     record and status (internal/jobs) and answered with a
//     schemas.ControlReply.
//
// Produces:
//   - sample requests (schemas.SampleRequest) on maker.v1.sample.<tenant>.<job>
//     (stream MAKER_SAMPLES), without a Nats-Msg-Id (no sample id is
//     published twice), each carrying its sample's token: the HMAC of
//     its sample id under the fleet's key, which coordinators share
//     through Redis (<prefix>:secrets) and voters never see;
//   - journal entries (schemas.JournalEntry: takeovers, decisions, arbiter
//     decisions, escalations, the end), each carrying the change of the
//     job's figures (schemas.Delta), and checkpoints in stream
//     MAKER_JOURNAL, fenced by the expected last subject sequence
//     (internal/journal);
//   - step-decided events (schemas.StepDecided) on core subject
//     maker.v1.decided.<tenant>.<job>, which voters use to skip and cancel
//     samples of decided steps;
//   - job progress (schemas.JobStatus) in KV bucket maker_status and the
//     final report (schemas.JobReport) in KV bucket maker_reports, both under
//     key <tenant>.<job>.
//
// # Shape
//
// Each job is a step machine (internal/core/step: events in, actions out,
// no I/O, the time passed in) inside a thin shell, jobRun. The shell feeds
// the machine what happened and carries out its actions in order, feeding
// outcomes back. What it keeps besides the bus it reaches through small
// ports (ports.go: the Tally, Budgets, Journals and Registry interfaces;
// Config.Storage names other adapters, nil ones are the fleet's: Redis
// through internal/store, the journal stream, the registry bucket). Its
// files: job.go (the loop and the actions), resume.go (takeover,
// cleanup, the journal replayed into the machine), journal.go (journal
// writes and checkpoints), jobcontrol.go (the registry's control of the
// job, a person's answer), arbitrate.go (the judge), report.go (status and
// report), metrics.go (the job's metrics, its tokens by model), admit.go (a wave's admission
// under the tenant's quotas and the fleet's weighted-fair capacity,
// internal/quota: requests refused for now wait in the job's deferred
// queue, never blocking its loop) and budget.go (reserve-then-dispatch:
// each admitted wave reserves its most possible cost in Redis before it is
// published and settles the actual cost when its results are counted; a
// wave that does not fit pauses the job as budget_exhausted); pricing.go
// prices answers by the fleet's table (the rule is internal/core/pricing's);
// schedule.go takes and renews the leases of jobs, fair.go chooses which
// job to take (weighted-fair across tenants, then priority, then age),
// holds the tenants' running-job quotas and hands a job back at a step
// boundary when another tenant waits (time slicing), coordinator.go takes
// jobs in and runs the coordinator's parts (Lifecycle, below),
// retention.go sweeps finished work, dlq.go moves poison requests to the
// dead letters, control.go answers people's controls and decisions,
// crash.go names the fault suite's crash points (Config.CrashAt).
//
// How a step is decided (waves, re-samples, the escalation ladder,
// speculation, adaptive k and the receipt) is the step machine's: see
// internal/core/step.
//
// # Lifecycle
//
// Run runs the coordinator's parts as services (internal/service),
// started in this order and stopped in reverse: the quota and price
// caches; the control service; then the work, which starts in order and
// stops together: the dead-letter mover, intake, the batch runner, the
// retention sweeper and the scheduler (which runs the jobs). On shutdown
// every job stops at a step boundary, checkpoints and hands its lease
// back, the other work ends, the control service answers until then, and
// the caches go last. A part that fails stops the others the same way,
// and Run returns its error.
package coordinator
