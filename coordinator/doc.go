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
//     (stream MAKER_SAMPLES), with Nats-Msg-Id = the sample id, each
//     carrying its sample's token: the HMAC of its sample id under the
//     fleet's key, which coordinators share through Redis (<prefix>:secrets)
//     and voters never see;
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
// Each job is a step machine (machine.go) inside a thin shell (job.go).
// The machine does no I/O: events come in as method calls (results
// arrived, Redis recorded them, a timer ticked, a tally was closed, the
// judge or a person decided, control changed) and it returns actions
// (publish a sample, record samples, settle a message, journal an entry,
// open or close the step, arbitrate, checkpoint, pause, end) that the shell
// carries out in order, feeding outcomes back. Its parts: results.go
// (screening results, acting on what Redis recorded), capability.go (the
// samples' tokens: a result counts only for a sample its sender was
// handed), claims.go (a result's token counts bounded by its request: one
// beyond is the red flag overclaim, charged at the bound), waves.go (how many
// samples to draw, re-sampling the overdue), decide.go (a decision and the
// step boundary), ladder.go (the escalation ladder), accounting.go (the
// job's schemas.Figures and what the journal holds of them), replay.go (a
// new owner's rebuild from the journal). The shell is job.go (the loop and
// the actions), resume.go (takeover, cleanup), journal.go (journal
// writes and checkpoints), jobcontrol.go (the registry's control of the
// job, a person's answer), arbitrate.go (the
// judge), report.go (status and report), admit.go (a wave's admission
// under the tenant's quotas and the fleet's weighted-fair capacity,
// internal/quota: requests refused for now wait in the job's deferred
// queue, never blocking its loop) and budget.go (reserve-then-dispatch:
// each admitted wave reserves its most possible cost in Redis before it is
// published and settles the actual cost when its results are counted; a
// wave that does not fit pauses the job as budget_exhausted); schedule.go
// takes and renews the leases of jobs, fair.go chooses which job to take
// (weighted-fair across tenants, then priority, then age), holds the
// tenants' running-job quotas and hands a job back at a step boundary
// when another tenant waits (time slicing), coordinator.go takes jobs in
// and runs the coordinator's parts (Lifecycle, below), retention.go sweeps
// finished work, dlq.go moves poison requests to the dead letters,
// control.go answers people's controls and decisions.
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
//
// # The step loop
//
// The first wave of a step is k samples (index 0 at the job's first
// temperature, 0 by default; the rest at 0.1). Each result is recorded in
// Redis by its index; the tally counts samples in index order, so the
// decision is the sequential rule applied to the answers, whatever order
// they arrive in. While undecided, with lead ℓ and u samples still
// uncounted, the coordinator tops up to k − ℓ − u more samples: no
// candidate can win before k − ℓ more valid votes, so no wave overshoots
// the sequential rule, and red-flagged samples are replaced. The next step
// starts from the winner's own next state. A vote is counted only if the
// task can move on from its key. A sample without a result after the job's
// sample timeout is re-published under a new sample id (same index, next
// attempt, each attempt waiting twice as long as the last, up to 16
// timeouts); the tally keeps whichever answer arrives first. A step that
// reaches the sample cap undecided climbs the job's escalation ladder (a
// stronger model, then the judge's panel, then a person; each climb is
// journaled, so a new owner resumes the step on its rung), or without one
// ends the job as no_consensus, with the step's tally in the report. A job
// that fails otherwise is retried with backoff and gets a failed report
// after Config.MaxJobAttempts failures. Guarantees under failures:
// docs/durability.md.
//
// # Speculation
//
// With JobSpec.SpeculationDepth D the machine samples up to D steps ahead
// of the open one (speculate.go), each from a guess of the step before's
// winner: its leader once it leads by a vote, else the task's reference
// answer. Those answers are held, not counted; a step whose guessed state
// is the state its real winner gave adopts them (recorded in index order
// as any others), so decisions, trace and figures other than waste are
// those of a run without speculation. A lost guess throws its steps away,
// counted as Figures.SpeculativeWasted; samples carry a branch number so
// a lost guess's answers never count for the real step.
//
// # Reliability
//
// k above is the open step's margin (reliability.go, machine.k): the job's
// K, or with a reliability target the smallest margin that keeps
// Π p_vote(p_low, k_i) over the job's steps at or above the target, p_low
// the 99 % Wilson lower bound of p estimated from the job's own decided
// votes (each winner taken as right), within [k_floor, a ceiling the
// sample cap holds]. Each step also gets a correlation threshold: the
// samples after which a race of independent votes at p_low is undecided
// with chance at most 0.001. A step that runs past it is correlated:
// counted, left out of the estimate, and (decorrelate on) its remaining
// samples are drawn with a paraphrased prompt, the job's decorrelation
// temperature and models, before the escalation ladder. Decisions journal
// their k and checkpoints carry the running receipt, so a new owner picks
// the same margins; every report carries the receipt (receipt.go).
// Rules and measurements: docs/statistics.md.
package coordinator
