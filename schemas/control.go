package schemas

import "strings"

// Control message kinds: a person's pause, resume or cancel of a job and a
// person's answer for a step, sent as core NATS requests to the
// coordinators, and the coordinators' reply to either.
//
// The job and its tenant are named by the subject, never by the body
// (<ns>.v1.control.<tenant>.<job>, <ns>.v1.decide.<tenant>.<job>): the
// NATS server decides who may publish there, so the subject proves who
// asked, and a body cannot name another tenant's job.
const (
	KindControlRequest = "control_request"
	KindDecideRequest  = "decide_request"
	KindControlReply   = "control_reply"
)

// Control actions a person may ask for.
const (
	ActionPause  = "pause"
	ActionResume = "resume"
	ActionCancel = "cancel"
)

// ControlOf returns the registry control an action asks for (resume asks
// the job to run), or "" for an unknown action.
func ControlOf(action string) string {
	switch action {
	case ActionPause:
		return ControlPause
	case ActionResume:
		return ControlRun
	case ActionCancel:
		return ControlCancel
	}
	return ""
}

// ControlRequest asks the coordinators to pause, resume or cancel the job
// its subject names. Asking for what already holds changes nothing, so a
// request may be repeated (or replayed) safely.
type ControlRequest struct {
	Header
	// Action is pause, resume or cancel.
	Action string `json:"action" jsonschema:"enum=pause,enum=resume,enum=cancel"`
}

// MessageKind implements Message.
func (*ControlRequest) MessageKind() string { return KindControlRequest }

// Validate implements Message.
func (r *ControlRequest) Validate() error {
	if err := r.Header.check(KindControlRequest); err != nil {
		return err
	}
	if ControlOf(r.Action) == "" {
		return invalid(KindControlRequest, "action is pause, resume or cancel, got %q", r.Action)
	}
	return nil
}

// maxVoteKey bounds a person's answer, as the judge's candidates are
// bounded.
const maxVoteKey = 8192

// DecideRequest is a person's answer for a step of the job its subject
// names: a step the fleet could not settle, which waits for a person. The
// coordinators refuse it for any other step (a healthy step, one decided
// already, one not reached yet).
type DecideRequest struct {
	Header
	// Step is the step; VoteKey its answer, as the task's canonical key.
	Step    int64  `json:"step" jsonschema:"minimum=0"`
	VoteKey string `json:"vote_key"`
	// By names the person, for the journal.
	By string `json:"by"`
}

// MessageKind implements Message.
func (*DecideRequest) MessageKind() string { return KindDecideRequest }

// Validate implements Message.
func (r *DecideRequest) Validate() error {
	const k = KindDecideRequest
	if err := r.Header.check(k); err != nil {
		return err
	}
	if r.Step < 0 {
		return invalid(k, "step must be >= 0, got %d", r.Step)
	}
	if r.VoteKey == "" || len(r.VoteKey) > maxVoteKey {
		return invalid(k, "vote_key must be 1 to %d bytes", maxVoteKey)
	}
	if strings.TrimSpace(r.By) == "" || len(r.By) > 256 {
		return invalid(k, "by must name who decides (1 to 256 bytes)")
	}
	return nil
}

// Decision returns the request as the registry records it (At is set when
// it is recorded).
func (r *DecideRequest) Decision() PersonDecision {
	return PersonDecision{Step: r.Step, VoteKey: r.VoteKey, By: r.By}
}

// Why a control or decide request was refused.
const (
	// CodeInvalid: the request or the job it names is malformed.
	CodeInvalid = "invalid"
	// CodeNotFound: no job has this id (in this tenant).
	CodeNotFound = "not_found"
	// CodeFinished: the job has ended, or is being cancelled.
	CodeFinished = "finished"
	// CodeNotWaiting: the step named is not waiting for a person (a
	// healthy step, one decided already, one not reached yet).
	CodeNotWaiting = "not_waiting"
	// CodeUnavailable: the coordinator could not read or write the
	// registry; asking again may succeed.
	CodeUnavailable = "unavailable"
)

// ControlProblem says why a request was refused.
type ControlProblem struct {
	// Code is invalid, not_found, finished, not_waiting or unavailable.
	Code string `json:"code" jsonschema:"enum=invalid,enum=not_found,enum=finished,enum=not_waiting,enum=unavailable"`
	// Message says it for a person.
	Message string `json:"message"`
}

// ControlReply is a coordinator's answer to a control or decide request:
// the job's registry record as the request left it, or the problem that
// refused it.
type ControlReply struct {
	Header
	// Tenant and JobID name the job, as the request's subject did.
	Tenant string `json:"tenant"`
	JobID  string `json:"job_id"`
	// Record is the job's registry record after the request (absent when
	// it was refused).
	Record *JobRecord `json:"record,omitempty"`
	// Changed is false when the job already was as asked: nothing was
	// written.
	Changed bool `json:"changed"`
	// Problem says why the request was refused (absent when it was not).
	Problem *ControlProblem `json:"problem,omitempty"`
}

// MessageKind implements Message.
func (*ControlReply) MessageKind() string { return KindControlReply }

// Validate implements Message.
func (r *ControlReply) Validate() error {
	const k = KindControlReply
	if err := r.Header.check(k); err != nil {
		return err
	}
	// A reply to a request on a malformed subject names no valid job.
	if (r.Record == nil) == (r.Problem == nil) {
		return invalid(k, "a reply holds either the record or a problem")
	}
	if p := r.Problem; p != nil {
		switch p.Code {
		case CodeInvalid, CodeNotFound, CodeFinished, CodeNotWaiting, CodeUnavailable:
		default:
			return invalid(k, "unknown problem code %q", p.Code)
		}
		if p.Message == "" {
			return invalid(k, "a problem needs a message")
		}
		if r.Changed {
			return invalid(k, "a refused request changed nothing")
		}
		return nil
	}
	if err := ValidTenant(r.Tenant); err != nil {
		return err
	}
	if err := ValidJobID(r.JobID); err != nil {
		return err
	}
	if r.Record.Tenant != r.Tenant || r.Record.JobID != r.JobID {
		return invalid(k, "record is job %s/%s, not %s/%s", r.Record.Tenant, r.Record.JobID, r.Tenant, r.JobID)
	}
	return r.Record.Validate()
}
