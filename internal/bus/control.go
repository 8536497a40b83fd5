package bus

import "strings"

// Job controls and person decisions are core NATS request/reply, served by
// the coordinators in the queue group QueueCoordinators:
//
//	maker.v1.control.<tenant>.<job>   pause, resume or cancel (schemas.ControlRequest)
//	maker.v1.decide.<tenant>.<job>    a person's answer for a step (schemas.DecideRequest)
//
// Both are answered with a schemas.ControlReply. The tenant and the job
// are the subject's: with authorization on, only tenant-<T> and the admin
// may publish on control.<T>.*, and only an approver or the admin on
// decide.*.*, so the subject proves who asked.

// QueueCoordinators is the queue group the coordinators serve control and
// decide requests in: each request is answered by one of them.
const QueueCoordinators = "coordinators"

// Request kinds of ParseControlSubject.
const (
	RequestControl = "control"
	RequestDecide  = "decide"
)

// ControlSubject is where pause, resume and cancel of a job are asked.
func (ns Namespace) ControlSubject(tenant, job string) string {
	return ns.subject(RequestControl) + tenant + "." + job
}

// ControlWildcard matches every job's control subject.
func (ns Namespace) ControlWildcard() string { return ns.subject(RequestControl) + "*.*" }

// DecideSubject is where a person's answer for a step of a job is sent.
func (ns Namespace) DecideSubject(tenant, job string) string {
	return ns.subject(RequestDecide) + tenant + "." + job
}

// DecideWildcard matches every job's decide subject.
func (ns Namespace) DecideWildcard() string { return ns.subject(RequestDecide) + "*.*" }

// ParseControlSubject splits a control or decide subject of ns into its
// kind (RequestControl or RequestDecide), tenant and job. ok is false for
// any other subject. The tenant and job are not validated.
func (ns Namespace) ParseControlSubject(subject string) (kind, tenant, job string, ok bool) {
	for _, k := range []string{RequestControl, RequestDecide} {
		rest, found := strings.CutPrefix(subject, ns.subject(k))
		if !found {
			continue
		}
		tenant, job, found = strings.Cut(rest, ".")
		if !found || tenant == "" || job == "" || strings.Contains(job, ".") {
			return "", "", "", false
		}
		return k, tenant, job, true
	}
	return "", "", "", false
}
