package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestQuotaSetShow: maker quota set changes only the flags given, the
// fleet's record holds its capacity, show lists them (the fleet's first),
// and bad input is refused before anything is written.
func TestQuotaSetShow(t *testing.T) {
	t.Parallel()
	maker := onFleet(t)
	decode := func(o outcome, v any) {
		t.Helper()
		if q, ok := v.(*schemas.TenantQuota); ok {
			*q = schemas.TenantQuota{} // fields left out (omitempty) are zero
		}
		decodeOK(t, o, v)
	}
	var q schemas.TenantQuota
	decode(maker("quota", "set", "--tenant", "acme", "--max-running-jobs", "2", "--rate", "50", "--weight", "3", "--json"), &q)
	if q.Tenant != "acme" || q.MaxRunningJobs != 2 || q.SamplesPerSecond != 50 || q.Weight != 3 {
		t.Fatalf("set: %+v", q)
	}
	decode(maker("quota", "set", "--tenant", "acme", "--max-inflight", "8", "--json"), &q)
	if q.MaxRunningJobs != 2 || q.MaxInflightSamples != 8 || q.Weight != 3 {
		t.Fatalf("a second set lost the first's values: %+v", q)
	}
	decode(maker("quota", "set", "--fleet", "--max-inflight", "64", "--json"), &q)
	if q.Tenant != "" || q.MaxInflightSamples != 64 {
		t.Fatalf("fleet: %+v", q)
	}
	var all []schemas.TenantQuota
	decode(maker("quota", "show", "--json"), &all)
	if len(all) != 2 || all[0].Tenant != "" || all[1].Tenant != "acme" {
		t.Fatalf("show: %+v", all)
	}
	decode(maker("quota", "show", "--tenant", "nobody", "--json"), &q)
	if q.Tenant != "nobody" || q.MaxRunningJobs != 0 {
		t.Fatalf("a tenant without a record: %+v", q)
	}
	text := maker("quota", "show")
	if text.code != 0 || !strings.Contains(text.stdout, "(fleet)") || !strings.Contains(text.stdout, "acme") {
		t.Fatalf("text show: %d %q %q", text.code, text.stdout, text.stderr)
	}
	for _, args := range [][]string{
		{"quota", "set", "--max-inflight", "1"},                                // neither --tenant nor --fleet
		{"quota", "set", "--tenant", "acme", "--fleet", "--max-inflight", "1"}, // both
		{"quota", "set", "--fleet", "--weight", "2"},                           // a tenant's quota on the fleet
		{"quota", "set", "--tenant", "acme", "--max-running-jobs", "-1"},       // negative
		{"quota", "set", "--tenant", "no.dots", "--max-running-jobs", "1"},     // bad tenant
	} {
		if o := maker(args...); o.code == 0 {
			t.Errorf("%v: accepted", args)
		}
	}
	decode(maker("quota", "show", "--tenant", "acme", "--json"), &q)
	if q.MaxRunningJobs != 2 {
		t.Fatalf("a refused set changed the record: %+v", q)
	}
}

// onFleet starts a nats-server with the fleet's topology and returns maker
// run against it.
func onFleet(t *testing.T) func(args ...string) outcome {
	t.Helper()
	srv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, srv.URL)
	if _, err := topology.Ensure(t.Context(), js, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	return func(args ...string) outcome { return runMain(t, append(args, "--nats", srv.URL)...) }
}

// decodeOK checks that o succeeded and decodes its JSON output into v.
func decodeOK(t *testing.T, o outcome, v any) {
	t.Helper()
	if o.code != ExitOK {
		t.Fatalf("exit %d: %s", o.code, o.stderr)
	}
	if err := json.Unmarshal([]byte(o.stdout), v); err != nil {
		t.Fatalf("%v: %s", err, o.stdout)
	}
}
