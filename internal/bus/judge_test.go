package bus_test

import (
	"slices"
	"testing"

	"github.com/makerfleet/makerfleet/internal/bus"
)

func TestJudgeNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ns                                                                 bus.Namespace
		stream, audit, subject, auditSubject, answers, sessions, approvals string
	}{
		{"", "MAKER_JUDGE", "MAKER_JUDGE_AUDIT", "maker.v1.judge.acme", "maker.v1.judge_audit.acme.s1", "maker_judge_answers", "maker_judge_sessions", "maker_judge_approvals"},
		{"blue-2", "BLUE_2_JUDGE", "BLUE_2_JUDGE_AUDIT", "blue-2.v1.judge.acme", "blue-2.v1.judge_audit.acme.s1", "blue_2_judge_answers", "blue_2_judge_sessions", "blue_2_judge_approvals"},
	}
	for _, tt := range tests {
		got := []string{tt.ns.JudgeStream(), tt.ns.JudgeAuditStream(), tt.ns.JudgeSubject("acme"), tt.ns.JudgeAuditSubject("acme", "s1"),
			tt.ns.JudgeAnswersBucket(), tt.ns.JudgeSessionsBucket(), tt.ns.JudgeApprovalsBucket()}
		want := []string{tt.stream, tt.audit, tt.subject, tt.auditSubject, tt.answers, tt.sessions, tt.approvals}
		if !slices.Equal(got, want) {
			t.Errorf("namespace %q: got %v, want %v", tt.ns, got, want)
		}
	}
	if got := bus.Namespace("").JudgeAuditFilter("", "s1"); got != "maker.v1.judge_audit.*.s1" {
		t.Errorf("JudgeAuditFilter = %q", got)
	}
	if got := []string{bus.Namespace("blue-2").ArbitrateStream(), bus.Namespace("blue-2").ArbitrateSubject("acme")}; !slices.Equal(got, []string{"BLUE_2_ARBITRATE", "blue-2.v1.arbitrate.acme"}) {
		t.Errorf("arbitration names %v", got)
	}
	// A job's key never names a session (session names hold no dot).
	if got := bus.JudgeJobKey("acme", "j1"); got != "acme.job.j1" || got == bus.JudgeSessionKey("acme", "job") {
		t.Errorf("JudgeJobKey = %q", got)
	}
	// A tenant's window key names no session and no job.
	if got := bus.JudgeTenantKey("acme"); got != "acme.tenant.window" || got == bus.JudgeJobKey("acme", "window") {
		t.Errorf("JudgeTenantKey = %q", got)
	}
	// Answers and approvals are keyed by tenant first, so a server's
	// permissions can scope a tenant's reads to <tenant>.>.
	if a, p := bus.JudgeAnswerKey("acme", "bg-1"), bus.JudgeApprovalKey("acme", "bg-1"); a != "acme.bg-1" || p != "acme.bg-1" {
		t.Errorf("JudgeAnswerKey = %q, JudgeApprovalKey = %q", a, p)
	}
	ns := bus.Namespace("blue-2")
	if got := ns.JudgeApproveSubject("approver"); got != "blue-2.v1.judge_approve.approver" || ns.JudgeApproveFilter() != "blue-2.v1.judge_approve.*" {
		t.Errorf("JudgeApproveSubject = %q", got)
	}
	for _, tt := range []struct {
		subject, want string
		ok            bool
	}{
		{"blue-2.v1.judge.acme", "acme", true},
		{"blue-2.v1.arbitrate.acme", "acme", true},
		{"maker.v1.judge.acme", "", false},
		{"blue-2.v1.judge_audit.acme.s1", "", false},
		{"blue-2.v1.judge.", "", false},
		{"blue-2.v1.judge.acme.more", "", false},
	} {
		if got, ok := ns.JudgeRequestTenant(tt.subject); got != tt.want || ok != tt.ok {
			t.Errorf("JudgeRequestTenant(%q) = %q, %v", tt.subject, got, ok)
		}
	}
	for _, tt := range []struct {
		subject, want string
		ok            bool
	}{
		{"blue-2.v1.judge_approve.approver", "approver", true},
		{"blue-2.v1.judge_approve.tenant-acme", "tenant-acme", true},
		{"blue-2.v1.judge_approve.a.b", "", false},
		{"blue-2.v1.judge.approver", "", false},
	} {
		if got, ok := ns.JudgeApproveIdentity(tt.subject); got != tt.want || ok != tt.ok {
			t.Errorf("JudgeApproveIdentity(%q) = %q, %v", tt.subject, got, ok)
		}
	}
}
