package cli

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestJobsPurge: maker jobs purge --before removes the journal, report,
// status and record of the jobs finished before the time (one tenant's
// with --tenant), --dry-run lists them and changes nothing, and a time in
// the future or an unreadable one is refused (exit 2).
func TestJobsPurge(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	env.StartCoordinator(coordinator.Config{RetentionInterval: -1})
	env.StartVoter(fleettest.NewFakeModel(nil, nil), voter.Config{Concurrency: 4})
	url := env.NATS.URL
	topo := env.Topo
	run := func(tenant string) string {
		spec := fleettest.HanoiSpec(2, 1, 1)
		spec.Tenant = tenant
		if rep := env.Run(&spec); rep.State != schemas.StateSolved {
			t.Fatalf("job: %s", rep.State)
		}
		fleettest.Eventually(t, 10*time.Second, func() bool {
			rec, _, err := jobs.Get(t.Context(), topo, tenant, spec.JobID)
			return err == nil && rec.Finished
		}, "job never finished")
		return spec.JobID
	}
	acme1, acme2, beta := run("acme"), run("acme"), run("beta")
	journal := func() uint64 {
		s, err := topo.JS.Stream(t.Context(), topo.NS.JournalStream())
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	hasReport := func(tenant, job string) bool {
		_, err := topo.Reports.Get(t.Context(), bus.JobKey(tenant, job))
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "purge"}, "before"},
		{[]string{"jobs", "purge", "--before", "2999-01-01T00:00:00Z"}, "in the future"},
		{[]string{"jobs", "purge", "--before", "-5h"}, "must not be negative"},
		{[]string{"jobs", "purge", "--before", "yesterday"}, "RFC 3339"},
		{[]string{"jobs", "purge", "--before", "1h", "--tenant", "Bad Tenant"}, "invalid tenant"},
		// Less than an hour ago: refused without --force.
		{[]string{"jobs", "purge", "--before", "0"}, "less than 1h0m0s ago"},
		{[]string{"jobs", "purge", "--before", "59m", "--tenant", "acme"}, "--force"},
		{[]string{"jobs", "purge", "--before", time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339)}, "less than 1h0m0s ago"},
	} {
		res := runMain(t, append(tc.args, "--nats", url)...)
		if res.code != ExitUsage || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("maker %v: exit %d, stderr %q; want exit 2 and %q", tc.args, res.code, res.stderr, tc.want)
		}
	}

	before := journal()
	res := runMain(t, "jobs", "purge", "--before", "0s", "--tenant", "acme", "--dry-run", "--json", "--nats", url)
	var dry struct {
		DryRun bool `json:"dry_run"`
		Jobs   int  `json:"jobs"`
		Items  []struct {
			Kind, Tenant, ID string
			What             []string
		} `json:"items"`
		JournalMessages int `json:"journal_messages"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &dry); err != nil || res.code != ExitOK {
		t.Fatalf("dry run: exit %d, %q (%v), stderr %q", res.code, res.stdout, err, res.stderr)
	}
	if !dry.DryRun || dry.Jobs != 2 || len(dry.Items) != 2 || dry.JournalMessages == 0 {
		t.Errorf("dry run listed %+v, want acme's 2 jobs", dry)
	}
	for _, it := range dry.Items {
		if it.Tenant != "acme" || it.ID != acme1 && it.ID != acme2 || strings.Join(it.What, ",") != "journal,report,status,record" {
			t.Errorf("dry run item %+v", it)
		}
	}
	if journal() != before || !hasReport("acme", acme1) || !hasReport("acme", acme2) {
		t.Fatal("the dry run removed something")
	}
	res = runMain(t, "jobs", "purge", "--before", "0s", "--tenant", "acme", "--dry-run", "--nats", url)
	if res.code != ExitOK || !strings.HasPrefix(res.stdout, "KIND") || !strings.Contains(res.stdout, "would remove: 2 jobs") {
		t.Errorf("dry run (text): exit %d, %q", res.code, res.stdout)
	}

	// An hour ago: these jobs finished after it, nothing goes.
	res = runMain(t, "jobs", "purge", "--before", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "--nats", url)
	if res.code != ExitOK || !strings.HasPrefix(res.stdout, "removed: 0 jobs") {
		t.Errorf("purge before an hour ago: exit %d, %q (%s)", res.code, res.stdout, res.stderr)
	}
	if journal() != before || !hasReport("acme", acme1) || !hasReport("beta", beta) {
		t.Fatal("a purge refused removed something")
	}
	res = runMain(t, "jobs", "purge", "--before", "0s", "--tenant", "acme", "--force", "--nats", url)
	want := "removed: 2 jobs (" + strconv.Itoa(dry.JournalMessages) + " journal messages, 2 reports, 2 statuses, 2 records, 0 leases)"
	if res.code != ExitOK || !strings.HasPrefix(res.stdout, want) {
		t.Errorf("purge: exit %d, %q, want %q (%s)", res.code, res.stdout, want, res.stderr)
	}
	if hasReport("acme", acme1) || hasReport("acme", acme2) || !hasReport("beta", beta) {
		t.Error("purge --tenant acme: wrong reports removed")
	}
	if got := journal(); got != before-uint64(dry.JournalMessages) {
		t.Errorf("journal: %d messages, want %d", got, before-uint64(dry.JournalMessages))
	}
	if _, _, err := jobs.Get(t.Context(), topo, "acme", acme1); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("acme's record: %v, want not found", err)
	}
}

// TestRetentionCommands: maker retention set merges ages into the
// fleet's, a tenant's or a job's policy, show prints what is in effect,
// unset removes a policy; bad ages and scopes are refused (exit 2).
func TestRetentionCommands(t *testing.T) {
	t.Parallel()
	nsrv := testkit.StartNATS(t)
	_, js := testkit.Connect(t, nsrv.URL)
	if _, err := topology.Ensure(t.Context(), js, topology.Config{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	srv := nsrv.URL
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"retention", "set", "--tenant", "acme", "--journal", "72h", "--reports", "720h"}, ExitOK, "retention of acme: journal=72h0m0s reports=720h0m0s\n"},
		{[]string{"retention", "set", "--tenant", "acme", "--dlq", "0"}, ExitOK, "retention of acme: journal=72h0m0s reports=720h0m0s dlq=0s\n"},
		{[]string{"retention", "set", "--tenant", "acme", "--job", "j1", "--journal", "0"}, ExitOK, "retention of job.acme.j1: journal=0s\n"},
		{[]string{"retention", "set", "--status", "12h"}, ExitOK, "retention of _fleet: status=12h0m0s\n"},
		{[]string{"retention", "set", "--journal", "5x"}, ExitUsage, ""},
		{[]string{"retention", "set", "--journal", "-1h"}, ExitUsage, ""},
		{[]string{"retention", "set"}, ExitUsage, ""},
		{[]string{"retention", "set", "--job", "j1", "--journal", "1h"}, ExitUsage, ""},
		{[]string{"retention", "unset", "--tenant", "nobody"}, ExitOK, ""},
	} {
		res := runMain(t, append(tc.args, "--nats", srv)...)
		if res.code != tc.code || tc.code == ExitOK && res.stdout != tc.out {
			t.Errorf("maker %v: exit %d, %q (%s); want exit %d, %q", tc.args, res.code, res.stdout, res.stderr, tc.code, tc.out)
		}
	}
	res := runMain(t, "retention", "show", "--tenant", "acme", "--job", "j1", "--json", "--nats", srv)
	var show struct {
		Effective map[string]string         `json:"effective"`
		Policies  []schemas.RetentionPolicy `json:"policies"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &show); err != nil || res.code != ExitOK {
		t.Fatalf("show: exit %d, %q (%v)", res.code, res.stdout, err)
	}
	want := map[string]string{"journal": "0s", "reports": "720h0m0s", "registry": "0s", "status": "12h0m0s", "dlq": "0s", "batches": "720h0m0s"}
	for k, v := range want {
		if show.Effective[k] != v {
			t.Errorf("show: %s = %q, want %q (%v)", k, show.Effective[k], v, show.Effective)
		}
	}
	if len(show.Policies) != 3 || show.Policies[0].Tenant != "" {
		t.Errorf("show: policies %+v, want the fleet's first, then acme's and acme/j1's", show.Policies)
	}
	res = runMain(t, "retention", "show", "--nats", srv)
	if res.code != ExitOK || !strings.Contains(res.stdout, "journal   168h0m0s") || !strings.Contains(res.stdout, "3 polic(ies) stored") {
		t.Errorf("show (fleet): exit %d, %q", res.code, res.stdout)
	}
}
