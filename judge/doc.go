// Package judge is the fleet's break-glass role: when everything else has
// failed on a problem, a panel of strong models attacks it in parallel and a
// judge model synthesises one structured answer. The same panel settles the
// coordinator's voting steps that no rung of their ladder could decide
// (arbitration), through gates of their own.
//
// Askers do not import this package: judgeclient sends the requests and
// waits for the answers.
//
// Consumes (names of the default namespace; see bus.Namespace), through
// the durable consumer "judges" on each stream, shared by every replica:
//   - break-glass requests (schemas.BreakGlassRequest) from stream
//     MAKER_JUDGE, subject maker.v1.judge.<tenant>;
//   - arbitration requests (schemas.ArbitrationRequest) from stream
//     MAKER_ARBITRATE, subject maker.v1.arbitrate.<tenant>;
//   - a person's approvals and denials of held requests
//     (schemas.ApprovalDecision), core NATS requests on
//     maker.v1.judge_approve.<identity>, queue group "judges": the
//     identity in the subject decides, and never the requester's own.
//
// The tenant of a request is the one its subject names (a secured server
// lets only that tenant's identity publish there); a body naming another
// is refused (break-glass) or dropped (arbitration).
//
// Produces:
//   - responses (schemas.BreakGlassResponse, schemas.ArbitrationResponse)
//     in KV bucket maker_judge_answers under <tenant>.<request id>: a held
//     response while a person must approve, then the final one, which for
//     an arbitration carries the step's schemas.ArbiterDecision; the
//     askers watch that key;
//   - audit records (schemas.BreakGlassAudit, request_kind saying which
//     kind) on stream MAKER_JUDGE_AUDIT, subject
//     maker.v1.judge_audit.<tenant>.<session> (an arbitration's session is
//     its job id), one per event;
//   - held requests (schemas.BreakGlassApproval) in KV bucket
//     maker_judge_approvals under <tenant>.<request id>, moved on by a
//     person's decision (replied to with the updated record);
//   - per-session, per-tenant (rolling window) and per-job invocation and
//     spend counters in KV bucket maker_judge_sessions, updated by
//     compare-and-set so that limits hold across concurrent calls and
//     judge replicas, and rebuilt from the audit stream when a key is
//     missing, so that deleting one resets no limit.
//
// A break-glass request passes these gates in order (Service.handle), and
// is refused with a reason at the first it fails (refusals are audited
// too):
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
//  6. cost gate (Settings.RequestGate): an estimate above RefuseFactor ×
//     the threshold of the stricter of the declared and the detected type
//     is refused ("escalate to a human"), one above the call's budget is
//     refused, one above ApprovalUSD is held for a person;
//  7. session limits, then the tenant's over its rolling window, reserved
//     atomically before any model is called.
//
// An arbitration request has no trigger, no prior attempts and no
// classification: a coordinator sends it for a step its own rungs drew
// (forged ones are checked like any other). It passes these gates in
// order (Service.arbitrate), and a refusal is a needs_human decision with
// the reason:
//
//  1. shape: the request decodes strictly (schemas.ArbitrationRequest's
//     Validate: sizes, candidates that are the rungs' tallies merged, a
//     request id that is the step's); one that does not, but names its
//     step consistently, is refused; one that does not even name it is
//     dropped;
//  2. panel and judge model: Settings.Arbitration;
//  3. context assembly (AssembleArbitration): the step's state (redacted),
//     candidates and rung tallies fenced as data; a candidate holding a
//     key-like string, or a prompt over the token cap, is refused;
//  4. cost gate (Settings.ArbitrationGate): as above, with the
//     arbitration section's threshold and budget (or what the job holds
//     for the call, the request's budget_usd, when less), and the same
//     approval flow;
//  5. per-job limits (Settings.Arbitration's JobInvocations and JobUSD),
//     reserved atomically like session limits, keyed by the job; then the
//     tenant's limits over its rolling window, which count its jobs'
//     arbitrations and its break-glass calls together;
//  6. panel and judge synthesis, whose vote key must be a candidate;
//  7. the decision: decided only for a full (not degraded) answer naming a
//     candidate with confidence at least the request's min confidence;
//     needs_human with the reason otherwise.
//
// Then the panel is called in parallel under a deadline (or, in
// pass-through mode, one fusion-capable endpoint does panel and judge), the
// judge model's output is validated, retried once, and otherwise degraded to
// the raw panel answers with a reason.
//
// Shutdown order: Stop stops fetching, lets handlers in flight finish up to
// Config.SoftStop, then cancels them (their requests are redelivered).
package judge
