package client_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/voter"
)

// TestBatch: a batch with an invalid line runs the rest; its output has
// one line per input line in input order, its error file the bad line.
func TestBatch(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	env.StartCoordinator(coordinator.Config{})
	env.StartVoter(fleettest.NewFakeModel(nil, nil), voter.Config{Concurrency: 4})
	c := dial(t, env, client.WithTenant("acme"))
	ctx := testCtx(t)

	input := strings.Join([]string{
		`{"custom_id": "a", "task": "hanoi", "params": {"disks": 2}, "k": 1}`,
		`{"custom_id": "b", "task": "hanoi", "params": {"disks": 99}, "k": 1}`,
		`{"custom_id": "c", "task": "hanoi", "params": {"disks": 3}, "k": 1, "seed": 4}`,
	}, "\n")
	rec, err := c.SubmitBatch(ctx, strings.NewReader(input), client.BatchOptions{Window: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Tenant != "acme" || rec.Counts.Total != 3 || rec.Counts.Invalid != 1 {
		t.Fatalf("batch: %+v", rec)
	}
	updates := 0
	done, err := c.WaitBatch(ctx, rec.ID, func(schemas.BatchRecord) { updates++ })
	if err != nil || done.State != schemas.BatchCompleted || done.Counts.Completed != 2 || done.Counts.Failed != 1 {
		t.Fatalf("waited: %+v, %v", done, err)
	}
	if updates == 0 {
		t.Error("WaitBatch passed no update")
	}
	if got, err := c.Batch(ctx, "acme/"+rec.ID); err != nil || got.State != schemas.BatchCompleted {
		t.Errorf("batch: %+v, %v", got, err)
	}
	var out bytes.Buffer
	if err := c.BatchOutput(ctx, rec.ID, &out); err != nil {
		t.Fatal(err)
	}
	lines := outputLines(t, &out)
	if len(lines) != 3 {
		t.Fatalf("%d output lines, want 3", len(lines))
	}
	for i, want := range []string{"a", "b", "c"} {
		l := lines[i]
		if l.CustomID != want {
			t.Errorf("line %d: custom_id %q, want %q", i+1, l.CustomID, want)
		}
		if ok := l.Response != nil && l.Response.Solved; ok == (want == "b") {
			t.Errorf("line %d (%s): response %v, error %+v", i+1, want, l.Response != nil, l.Error)
		}
	}
	var errs bytes.Buffer
	if err := c.BatchErrors(ctx, rec.ID, &errs); err != nil {
		t.Fatal(err)
	}
	if bad := outputLines(t, &errs); len(bad) != 1 || bad[0].CustomID != "b" || bad[0].Error == nil {
		t.Errorf("error file: %+v", bad)
	}
	if list, err := c.ListBatches(ctx, ""); err != nil || len(list) != 1 || list[0].ID != rec.ID {
		t.Errorf("list: %+v, %v", list, err)
	}
	if _, err := c.CancelBatch(ctx, rec.ID); !errors.Is(err, client.ErrFinished) {
		t.Errorf("cancel a completed batch: %v, want ErrFinished", err)
	}
	dup := `{"custom_id": "x", "task": "hanoi", "params": {"disks": 2}, "k": 1}` + "\n" +
		`{"custom_id": "x", "task": "hanoi", "params": {"disks": 3}, "k": 1}`
	if _, err := c.SubmitBatch(ctx, strings.NewReader(dup), client.BatchOptions{}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("duplicate custom_id: %v, want ErrInvalid", err)
	}
	if _, err := c.Batch(ctx, "batch_nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("unknown batch: %v, want ErrNotFound", err)
	}
	if _, err := c.Batch(ctx, "other/"+rec.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another tenant's batch: %v, want ErrNotFound", err)
	}
}

func outputLines(t *testing.T, r *bytes.Buffer) []schemas.BatchOutputLine {
	t.Helper()
	var out []schemas.BatchOutputLine
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l schemas.BatchOutputLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}
