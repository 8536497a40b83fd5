package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestTopologyCommands (issue 9, finding 11): `maker topology show` lists
// every stream and bucket as missing on a bare server; `maker topology
// create` makes the fleet's and the judge's, which show then lists with
// their replicas; a second create changes nothing.
func TestTopologyCommands(t *testing.T) {
	t.Parallel()
	srv := testkit.StartNATS(t).URL
	rows := func(args ...string) []topologyRow {
		t.Helper()
		res := runMain(t, append(args, "--json", "--nats", srv)...)
		if res.code != ExitOK {
			t.Fatalf("maker %v: exit %d, stderr %q", args, res.code, res.stderr)
		}
		var out []topologyRow
		if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
			t.Fatalf("maker %v printed %q: %v", args, res.stdout, err)
		}
		return out
	}
	before := rows("topology", "show")
	// Every stream, bucket and object store of the fleet and the judge:
	// 7 + 12 + 1 + 3 + 3.
	if len(before) != 26 {
		t.Fatalf("show lists %d streams and buckets, want 26", len(before))
	}
	listed := map[string]bool{}
	for _, r := range before {
		listed[r.Name] = true
	}
	for _, name := range []string{"MAKER_BATCHES", "maker_quotas", "maker_apikeys", "maker_batches", "maker_prices", "maker_providers", "maker_presence", "maker_inputs", "MAKER_JUDGE_AUDIT", "MAKER_WEBHOOKS", "maker_webhooks"} {
		if !listed[name] {
			t.Errorf("show does not list %s", name)
		}
	}
	for _, r := range before {
		if r.Exists {
			t.Errorf("bare server: %s %s exists", r.Kind, r.Name)
		}
	}
	for range 2 {
		for _, r := range rows("topology", "create") {
			if !r.Exists || r.Replicas != 1 {
				t.Errorf("after create: %+v, want it present with 1 replica", r)
			}
		}
	}
	res := runMain(t, "topology", "show", "--nats", srv)
	if res.code != ExitOK || !strings.Contains(res.stdout, "MAKER_SAMPLES") || strings.Contains(res.stdout, "missing") {
		t.Errorf("show: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	if res := runMain(t, "topology", "create", "--replicas", "0", "--nats", srv); res.code != ExitUsage {
		t.Errorf("create --replicas 0: exit %d, want %d", res.code, ExitUsage)
	}
}
