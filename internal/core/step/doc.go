// Package step is a MAKER job's step machine: it decides what the job does
// next from what happened, and does no I/O. It imports only the core
// (internal/core/vote, plan, pricing), schemas and task, and is given the
// time with each event.
//
// Events come in as method calls (results arrived: OnResults; Redis
// recorded them: Recorded or RecordFailed; a timer ticked: OnTick; a tally
// was closed: Closed or Reopen; the judge or a person decided: Arbitrated,
// Person; control changed: ObeyControl) and each returns the Actions the
// shell carries out in order (publish a sample, record samples, settle a
// message, journal an entry, open or close the step, arbitrate,
// checkpoint, pause, end). An action whose outcome the machine needs
// (record, close the step, arbitrate) is the last of its list; the shell
// feeds its outcome back as the next event. The coordinator's jobRun is
// the shell of the fleet; the tests' harness (harness_test.go) is a shell
// over an in-memory vote.Tally.
//
// Its parts: machine.go (the machine, its actions), results.go (screening
// results, acting on what Redis recorded), capability.go (the samples'
// tokens: a result counts only for a sample its sender was handed),
// claims.go (a result's token counts bounded by its request: one beyond is
// the red flag overclaim, charged at the bound), waves.go (how many
// samples to draw, re-sampling the overdue), decide.go (a decision and the
// step boundary), ladder.go (the escalation ladder), speculate.go (steps
// sampled ahead), reliability.go and relstats.go (each step's k, the
// correlation test, the receipt's statistics), receipt.go, accounting.go
// and pricing.go (the job's schemas.Figures, what the journal holds of
// them, an answer's price), replay.go (a new owner's rebuild from the
// journal; Snapshot, the checkpoint), crashpoint.go (where the fault suite
// may stop a coordinator), tokens.go (tokens by model, for the metrics).
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
// k above is the open step's margin (reliability.go, Machine.K): the job's
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
package step
