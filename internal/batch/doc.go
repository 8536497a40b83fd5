// Package batch runs batches: one job per line of a JSONL input, fed into
// the fleet a window at a time, with results as JSONL in input order.
//
// The Store is the client side (the HTTP API, the public client and the
// CLI): Create reads an input line by line, checks each line as a job
// submit would (jobs.Prepare with the task registry) without enqueueing
// anything, stores every line as one schemas.BatchItem on the batch
// stream and then writes the schemas.BatchRecord (state queued) to the
// batches bucket. A line that is not a job (too long, not JSON, unknown
// fields or task, invalid params, another tenant named) is kept with its
// error and line number, and the rest runs; a batch that cannot run as a
// whole (a duplicate custom_id, no lines, too many lines, an unreadable
// input) is refused with ErrInvalid, its stored lines purged: nothing of
// it ever runs. A tenant with CreateOptions.MaxOpen (default 16) batches
// open (queued, running or cancelling) is refused with ErrTooMany before
// its input is read. Get, List, Cancel and Wait read and change the record;
// Output and Errors stream the results in input order.
//
// The Runner runs inside every coordinator (coordinator.Run starts it).
// It watches the batches bucket; for each batch not ended it takes the
// batch's lease (internal/lease, in the batches bucket under
// <tenant>.<batch>-lease, so one runner feeds a batch) and feeds the batch's
// jobs into the fleet in input order (job id <batch>-<line>, with the
// batch's id, line and priority), keeping at most the batch's window
// unfinished, and counts each job's outcome as its report arrives. Every
// change to the record is one compare-and-set of the record itself, which
// holds the cursor (lines fed so far) and the lines fed but not yet counted
// (Pending, at most a window): a runner that dies is replaced by another
// coordinator's once its lease lapses, which resumes at the cursor;
// submitting a job twice is a no-op (the job registry keeps an id once),
// and a job is counted only by the write that takes it out of Pending, so
// it is counted once whoever sees its report.
//
// A runner feeds at most MaxBatches batches, shared weighted-fair among
// the tenants (fair.go): it takes a waiting batch of the tenant with the
// fewest fed by it first, then the oldest. When it is full, and a batch
// has waited a scan interval while its tenant has fewer than its share
// (ceil(MaxBatches / tenants with open batches)) and another tenant more,
// it hands back the newest batch of the tenant most over its share: that
// batch stops between two jobs and its lease is released, and it is fed
// again from its cursor by a runner with room, or by this one later.
//
// Subjects, buckets and kinds:
//
//	stream <NS>_BATCHES   <ns>.v1.batch.<tenant>.<batch>   schemas.BatchItem, one per input line, in order
//	KV <ns>_batches       <tenant>.<batch>                 schemas.BatchRecord
//	                      <tenant>.<batch>-lease           the runner's lease (schemas.Lease)
//	KV <ns>_jobs          <tenant>.<batch>-<line>          the jobs the runner registers (and queues on
//	                                                       <ns>.v1.job.<tenant>)
//	KV <ns>_reports       <tenant>.<batch>-<line>          watched for the jobs' outcomes; read by Output
//
// Memory does not grow with a batch: lines are read one at a time into a
// buffer of at most MaxLineBytes, stored with a bounded number of
// publishes in flight, and read back through an ordered consumer. The one
// exception is Create's duplicate check: a set of 8-byte hashes of the
// custom_ids seen (with the stream sequence of each, to confirm a match),
// about 40 bytes a line, freed when Create returns.
package batch
