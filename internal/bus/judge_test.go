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
}

// EnsureJudge creates the judge's streams and buckets once, leaves them on
// a second call, and TeardownJudge removes exactly them.
func TestEnsureJudge(t *testing.T) {
	t.Parallel()
	js := jetStream(t)
	cfg := bus.JudgeConfig{Namespace: "jt"}
	for range 2 {
		topo, err := bus.EnsureJudge(opCtx(t), js, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if topo.Answers == nil || topo.Sessions == nil || topo.Approvals == nil {
			t.Fatal("missing bucket handle")
		}
	}
	want := []string{"JT_JUDGE", "JT_JUDGE_AUDIT", "KV_jt_judge_answers", "KV_jt_judge_approvals", "KV_jt_judge_sessions"}
	if got := names(t, js); !slices.Equal(got, want) {
		t.Errorf("streams %v, want %v", got, want)
	}
	if _, err := js.Consumer(opCtx(t), "JT_JUDGE", bus.ConsumerJudges); err != nil {
		t.Errorf("consumer: %v", err)
	}
	if err := bus.TeardownJudge(opCtx(t), js, "jt"); err != nil {
		t.Fatal(err)
	}
	if got := names(t, js); len(got) != 0 {
		t.Errorf("after teardown: %v", got)
	}
	if _, err := bus.EnsureJudge(opCtx(t), js, bus.JudgeConfig{Namespace: "Bad NS"}); err == nil {
		t.Error("EnsureJudge accepted an invalid namespace")
	}
}
