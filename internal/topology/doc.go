// Package topology declares the fleet's and the judge's storage on NATS
// JetStream, every stream, shared consumer and KV bucket, in one table
// (Table): for each its config (subjects, retention, storage, limits,
// duplicate window, TTL and history), who creates it and which feature
// owns it. Package bus is the transport these are reached through; the
// names come from bus.Namespace.
//
// One function creates from the table and one binds it, creating nothing:
//
//   - Ensure (the fleet's rows) and EnsureJudge (the judge's) create what
//     is missing: coordinators, `maker topology create`, judges, the
//     embedded fleets of `maker run` and the tests;
//   - Open and OpenJudge bind what exists, and fail with ErrNoFleet or
//     ErrNoJudge (saying who creates it) when any of it is missing: the
//     readers (clients, `maker serve`, the CLI's read commands); Await
//     waits for it instead (voters, `maker serve`);
//   - FeatureBucket creates a feature's bucket when the feature first
//     writes (retention policies, calibrations).
//
// Topology of the default namespace "maker" (every subject carries the
// tenant, so tenants never share one; another Namespace renames every
// stream, bucket and subject, so fleets on one server share nothing):
//
//	stream MAKER_JOBS     maker.v1.job.<tenant>            job specs; work queue;
//	                                                       durable "coordinators" shared by all coordinators
//	stream MAKER_SAMPLES  maker.v1.sample.<tenant>.<job>   sample requests; work queue;
//	                                                       durable "voters" shared by all voters
//	stream MAKER_RESULTS  maker.v1.result.<tenant>.<job>.<gen>
//	                                                       sample results; work queue; one durable per
//	                                                       job and lease generation, read by its owner
//	stream MAKER_JOURNAL  maker.v1.journal.<tenant>.<job>.d  decisions and takeovers, appended with an
//	                                                       expected last subject sequence (fencing)
//	                      maker.v1.journal.<tenant>.<job>.c  checkpoints (the resume cursor)
//	stream MAKER_BATCHES  maker.v1.batch.<tenant>.<batch>  batch input lines, one message per line
//	stream MAKER_DLQ      maker.v1.dlq.<tenant>.<job>      dead letters; limits retention
//	core subject          maker.v1.decided.<tenant>.<job>  step-decided events (voters skip/cancel)
//	core request/reply    maker.v1.control.<tenant>.<job>  pause, resume, cancel (bus/control.go);
//	                                                       served by the coordinators, queue group "coordinators"
//	core request/reply    maker.v1.decide.<tenant>.<job>   a person's answer for a step (bus/control.go); same
//	KV maker_jobs         <tenant>.<job>                   job registry: spec, control, finished
//	KV maker_leases       <tenant>.<job>                   which coordinator owns a job, until when
//	KV maker_tasks        <name>.<version>                 registered task specs (immutable)
//	KV maker_status       <tenant>.<job>                   job progress, a few updates a second
//	KV maker_reports      <tenant>.<job>                   final job reports
//	KV maker_quotas       <tenant>, _fleet                 tenants' quotas
//	KV maker_apikeys      <hash of the key>                API keys
//	KV maker_batches      <tenant>.<batch>                 batch records
//	KV maker_prices       <model> (bus.SafeKey), _default  the fleet's price table (operator only)
//	KV maker_providers    <deployment>                     the provider registry (operator only; voters read)
//	KV maker_retention    _fleet, <tenant>, job.<tenant>.<job>  retention policies (made when first set)
//	KV maker_calibrations <task>.<model>.<prompt version>  models' calibrations (made when first stored)
//
// The judge's, created by EnsureJudge:
//
//	stream MAKER_JUDGE        maker.v1.judge.<tenant>                  break-glass requests; work queue;
//	                                                                   durable "judges" shared by all judges
//	stream MAKER_ARBITRATE    maker.v1.arbitrate.<tenant>              arbitration requests; work queue;
//	                                                                   durable "judges" shared by all judges
//	stream MAKER_JUDGE_AUDIT  maker.v1.judge_audit.<tenant>.<session>  audit records; kept (limits policy)
//	KV maker_judge_answers    <tenant>.<request id>                    responses (held, then final)
//	KV maker_judge_sessions   <tenant>.<session>                       per-session invocations and spend
//	                          <tenant>.job.<job>                       per-job arbitrations and spend
//	                          <tenant>.tenant.window                   the tenant's calls and spend in the
//	                                                                   rolling window
//	KV maker_judge_approvals  <tenant>.<request id>                    requests held for a person
//	core NATS                 maker.v1.judge_approve.<identity>        a person's approve or deny, request
//	                                                                   and reply, queue group "judges"
//
// Every key of the judge's buckets starts with the tenant the request's
// subject names, so that a server's permissions can let tenant T read
// (and watch) only keys T.>: a request id alone says nothing of whose it
// is, and two tenants may pick the same one. The identity in an
// approval's subject is the approver: the server lets only the approver
// and admin identities publish there, each only on its own name, so the
// subject proves who approves.
package topology
