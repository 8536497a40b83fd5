// Package judge is the fleet's break-glass role: when everything else has
// failed on a problem, a panel of strong models attacks it in parallel and a
// judge model synthesises one structured answer.
//
// Consumes (names of the default namespace; see bus.Namespace):
//   - break-glass requests (schemas.BreakGlassRequest) from stream
//     MAKER_JUDGE, subject maker.v1.judge.<tenant>, through the durable
//     consumer "judges" shared by every judge replica.
//
// Produces:
//   - responses (schemas.BreakGlassResponse) in KV bucket
//     maker_judge_answers under the request id: a held response while a
//     person must approve, then the final one; Ask watches that key;
//   - audit records (schemas.BreakGlassAudit) on stream MAKER_JUDGE_AUDIT,
//     subject maker.v1.judge_audit.<tenant>.<session>, one per event;
//   - held requests (schemas.BreakGlassApproval) in KV bucket
//     maker_judge_approvals, moved on by Approve and Deny;
//   - per-session invocation and spend counters in KV bucket
//     maker_judge_sessions, updated by compare-and-set so that limits hold
//     across concurrent calls and judge replicas.
//
// A request passes these gates in order, and is refused with a reason at
// the first it fails (refusals are audited too):
//
//  1. recursion guard: a request made from inside a panel (ParentRequestID
//     set) is refused; panel members get no tools either;
//  2. trigger: the problem starts with "break glass:";
//  3. prior attempts: a local model, a single frontier model and the
//     existing tools were tried (one PriorAttempt of each kind);
//  4. classification (Classify) and panel selection (Settings.Panels, or
//     the request's fusion plugin);
//  5. context assembly (Assemble): files re-checked by the secret guard,
//     secrets redacted, size and token caps;
//  6. cost gate (Settings.Gate): an estimate above RefuseFactor × the
//     type's threshold is refused ("escalate to a human"), one above the
//     call's budget is refused, one above ApprovalUSD is held for a person;
//  7. session limits, reserved atomically before any model is called.
//
// Then the panel is called in parallel under a deadline (or, in
// pass-through mode, one fusion-capable endpoint does panel and judge), the
// judge model's output is validated, retried once, and otherwise degraded to
// the raw panel answers with a reason.
//
// Shutdown order: Stop stops fetching, lets handlers in flight finish up to
// Config.SoftStop, then cancels them (their requests are redelivered).
package judge
