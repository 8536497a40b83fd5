package retention_test

import (
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/retention"
	"github.com/makerfleet/makerfleet/schemas"
)

func secs(d time.Duration) *int64 { s := int64(d / time.Second); return &s }

// TestPolicyFor: each kind comes from the job's policy, else the
// tenant's, else the fleet's, else the defaults; 0 keeps forever, and the
// registry record is kept at least as long as the rest of the job.
func TestPolicyFor(t *testing.T) {
	t.Parallel()
	const h = time.Hour
	pol := retention.Policy{
		Fleet:   schemas.RetentionAges{JournalSeconds: secs(48 * h)},
		Tenants: map[string]schemas.RetentionAges{"beta": {JournalSeconds: secs(h), ReportsSeconds: secs(2 * h), RegistrySeconds: secs(3 * h), StatusSeconds: secs(h)}},
		Jobs:    map[string]schemas.RetentionAges{"beta.keep": {JournalSeconds: secs(0)}, "acme.long": {StatusSeconds: secs(1000 * h)}},
	}
	d := retention.Defaults
	for _, tc := range []struct {
		name, tenant, job string
		want              retention.Ages
	}{
		{"defaults under the fleet's journal", "acme", "j1", retention.Ages{Journal: 48 * h, Reports: d.Reports, Registry: d.Registry, Status: d.Status, DLQ: d.DLQ, Batches: d.Batches}},
		{"tenant override", "beta", "j1", retention.Ages{Journal: h, Reports: 2 * h, Registry: 3 * h, Status: h, DLQ: d.DLQ, Batches: d.Batches}},
		{"job keeps its journal forever: its record too", "beta", "keep", retention.Ages{Journal: 0, Reports: 2 * h, Registry: 0, Status: h, DLQ: d.DLQ, Batches: d.Batches}},
		{"registry raised to the longest", "acme", "long", retention.Ages{Journal: 48 * h, Reports: d.Reports, Registry: 1000 * h, Status: 1000 * h, DLQ: d.DLQ, Batches: d.Batches}},
		{"no policy at all", "gamma", "", retention.Ages{Journal: 48 * h, Reports: d.Reports, Registry: d.Registry, Status: d.Status, DLQ: d.DLQ, Batches: d.Batches}},
	} {
		if got := pol.For(tc.tenant, tc.job); got != tc.want {
			t.Errorf("%s: For(%s, %s) = %+v, want %+v", tc.name, tc.tenant, tc.job, got, tc.want)
		}
	}
	if got := (retention.Policy{}).For("acme", "j"); got != retention.Defaults {
		t.Errorf("empty policy: %+v, want the defaults %+v", got, retention.Defaults)
	}
}

// TestDue: past the age at now, never for 0 (forever) or an unknown end.
func TestDue(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		ended time.Time
		age   time.Duration
		want  bool
	}{
		{now.Add(-2 * time.Hour), time.Hour, true},
		{now.Add(-time.Hour), time.Hour, true},
		{now.Add(-time.Minute), time.Hour, false},
		{now.Add(-1000 * time.Hour), 0, false},
		{time.Time{}, time.Hour, false},
	} {
		if got := retention.Due(tc.ended, now, tc.age); got != tc.want {
			t.Errorf("Due(%v, %v) = %v, want %v", tc.ended, tc.age, got, tc.want)
		}
	}
}
