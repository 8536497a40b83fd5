package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestBatchCommands: maker batch submit --wait writes the output in input
// order and the error file with the invalid line; status, list, output
// and cancel read and change the batch; a duplicate custom_id and
// malformed ids are refused with exit 2.
func TestBatchCommands(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(fleettest.NewFakeModel(nil, nil), voter.Config{Concurrency: 4})
	url := env.NATS.URL
	dir := t.TempDir()
	in, out, errs := batchFiles(t, dir)

	res := runMain(t, "batch", "submit", in, "--nats", url, "--tenant", "acme", "--wait", "--output", out, "--errors", errs, "--json")
	if res.code != ExitOK {
		t.Fatalf("batch submit: exit %d: %s", res.code, res.stderr)
	}
	var rec schemas.BatchRecord
	if err := json.Unmarshal([]byte(res.stdout), &rec); err != nil || rec.State != schemas.BatchCompleted || rec.Counts.Completed != 2 || rec.Counts.Failed != 1 {
		t.Fatalf("batch submit printed %q (%v)", res.stdout, err)
	}
	checkBatchFiles(t, out, errs, rec, res.stderr)

	res = runMain(t, "batch", "status", "acme/"+rec.ID, "--nats", url)
	if want := "acme/" + rec.ID + ": completed, 3 lines (1 invalid), 2 submitted, 2 completed, 1 failed, 0 cancelled\n"; res.code != ExitOK || res.stdout != want {
		t.Errorf("batch status: exit %d, %q; want %q (%s)", res.code, res.stdout, want, res.stderr)
	}
	res = runMain(t, "batch", "list", "--tenant", "acme", "--nats", url)
	if res.code != ExitOK || !strings.Contains(res.stdout, rec.ID) || !strings.HasPrefix(res.stdout, "BATCH") {
		t.Errorf("batch list: exit %d, %q", res.code, res.stdout)
	}
	res = runMain(t, "batch", "output", rec.ID, "--tenant", "acme", "--nats", url)
	if data, _ := os.ReadFile(out); res.code != ExitOK || res.stdout != string(data) {
		t.Errorf("batch output: exit %d, %q; want the --wait output", res.code, res.stdout)
	}
	res = runMain(t, "batch", "list", "--nats", url, "--json")
	if res.code != ExitOK || strings.TrimSpace(res.stdout) != "[]" {
		t.Errorf("another tenant's batch list: exit %d, %q", res.code, res.stdout)
	}

	// Without --wait: the id; a queued batch can be cancelled.
	res = runMain(t, "batch", "submit", in, "--nats", url, "--tenant", "acme", "-q")
	id := strings.TrimSpace(res.stdout)
	if res.code != ExitOK || schemas.ValidBatchID(id) != nil {
		t.Fatalf("batch submit: exit %d, %q, %s", res.code, res.stdout, res.stderr)
	}

	dup := filepath.Join(dir, "dup.jsonl")
	writeLines(t, dup,
		`{"custom_id": "x", "task": "hanoi", "params": {"disks": 2}, "k": 1}`,
		`{"custom_id": "x", "task": "hanoi", "params": {"disks": 3}, "k": 1}`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"batch", "submit", dup}, `custom_id "x"`},
		{[]string{"batch", "submit", filepath.Join(dir, "missing.jsonl")}, "no such file"},
		{[]string{"batch", "submit", in, "--output", out}, "--output and --errors need --wait"},
		{[]string{"batch", "cancel", "acme/" + rec.ID}, "completed"},
		{[]string{"batch", "status", "Not-An-Id"}, "invalid batch id"},
		{[]string{"batch", "status", "beta/" + rec.ID, "--tenant", "acme"}, `names tenant "beta"`},
	} {
		res := runMain(t, append(tc.args, "--nats", url)...)
		if res.code != ExitUsage || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("maker %v: exit %d, %q; want exit %d saying %q", tc.args, res.code, res.stderr, ExitUsage, tc.want)
		}
	}
	res = runMain(t, "batch", "status", "acme/batch_nope", "--nats", url)
	if res.code != ExitError || !strings.Contains(res.stderr, "unknown batch") {
		t.Errorf("unknown batch: exit %d, %q", res.code, res.stderr)
	}
}

// batchFiles writes the input of a batch of three lines, the second
// invalid, in dir, and names the files for its output and errors.
func batchFiles(t *testing.T, dir string) (in, out, errs string) {
	t.Helper()
	in = filepath.Join(dir, "jobs.jsonl")
	writeLines(t, in,
		`{"custom_id": "first", "task": "hanoi", "params": {"disks": 2}, "k": 1}`,
		`{"custom_id": "broken", "task": "hanoi", "params": {"disks": 0}, "k": 1}`,
		`{"custom_id": "third", "task": "hanoi", "params": {"disks": 3}, "k": 1}`)
	return in, filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "errors.jsonl")
}

// checkBatchFiles checks what batch submit --wait --output out --errors
// errs wrote for batchFiles' input: every line in input order, the
// invalid one in the error file, the summary on stderr.
func checkBatchFiles(t *testing.T, out, errs string, rec schemas.BatchRecord, stderr string) {
	t.Helper()
	if got := customIDs(t, out); got != "first broken third" {
		t.Errorf("output custom_ids %q, want input order", got)
	}
	if got := customIDs(t, errs); got != "broken" {
		t.Errorf("error file custom_ids %q", got)
	}
	if !strings.Contains(stderr, rec.ID+" completed") {
		t.Errorf("no summary on stderr: %q", stderr)
	}
}

func writeLines(t *testing.T, name string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// customIDs lists the custom_ids of a JSONL output file, in order.
func customIDs(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var o schemas.BatchOutputLine
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatalf("%s: %q: %v", name, l, err)
		}
		ids = append(ids, o.CustomID)
	}
	return strings.Join(ids, " ")
}
