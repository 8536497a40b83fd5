package bus_test

import (
	"testing"

	"github.com/makerfleet/makerfleet/internal/bus"
)

// TestControlSubjects: the control and decide subjects carry the tenant and
// the job, and are read back from the subject only (the NATS server's
// permissions are on the subject, so it proves who asked).
func TestControlSubjects(t *testing.T) {
	t.Parallel()
	ns := bus.Namespace("fleet-a")
	if got := ns.ControlSubject("alpha", "j1"); got != "fleet-a.v1.control.alpha.j1" {
		t.Errorf("ControlSubject = %q", got)
	}
	if got := bus.Namespace("").DecideSubject("alpha", "j1"); got != "maker.v1.decide.alpha.j1" {
		t.Errorf("DecideSubject = %q", got)
	}
	if ns.ControlWildcard() != "fleet-a.v1.control.*.*" || ns.DecideWildcard() != "fleet-a.v1.decide.*.*" {
		t.Errorf("wildcards %q, %q", ns.ControlWildcard(), ns.DecideWildcard())
	}
	for _, tc := range []struct {
		subject, kind, tenant, job string
	}{
		{"fleet-a.v1.control.alpha.j1", bus.RequestControl, "alpha", "j1"},
		{"fleet-a.v1.decide.beta.j-2", bus.RequestDecide, "beta", "j-2"},
		{"fleet-a.v1.control.alpha", "", "", ""},
		{"fleet-a.v1.control.alpha.j1.x", "", "", ""},
		{"fleet-a.v1.control..j1", "", "", ""},
		{"maker.v1.control.alpha.j1", "", "", ""}, // another namespace
		{"fleet-a.v1.job.alpha", "", "", ""},
	} {
		kind, tenant, job, ok := ns.ParseControlSubject(tc.subject)
		if ok != (tc.kind != "") || kind != tc.kind || tenant != tc.tenant || job != tc.job {
			t.Errorf("ParseControlSubject(%q) = %q, %q, %q, %v; want %q, %q, %q", tc.subject, kind, tenant, job, ok, tc.kind, tc.tenant, tc.job)
		}
	}
}
