package batch

import (
	"bufio"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

func rec(state string, total, submitted, cursor int64, pending ...int64) schemas.BatchRecord {
	r := schemas.BatchRecord{
		Header: schemas.NewHeader(schemas.KindBatchRecord), ID: "batch_t", Tenant: "acme", State: state, Window: 4,
		Counts: schemas.BatchCounts{Total: total, Valid: total, Submitted: submitted}, Cursor: cursor, Pending: pending,
	}
	return r
}

// The record's decisions, as the runner and the store apply them.
func TestRecordDecisions(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		in      schemas.BatchRecord
		do      func(*schemas.BatchRecord) error
		want    schemas.BatchRecord
		wantErr error
	}{
		{"start a queued batch", rec(schemas.BatchQueued, 3, 0, 0),
			func(r *schemas.BatchRecord) error { start(r, now); return nil },
			rec(schemas.BatchRunning, 3, 0, 0), nil},
		{"start leaves a cancelling batch", rec(schemas.BatchCancelling, 3, 1, 1, 1),
			func(r *schemas.BatchRecord) error { start(r, now); return nil },
			rec(schemas.BatchCancelling, 3, 1, 1, 1), nil},
		{"feed two lines", rec(schemas.BatchRunning, 5, 1, 1, 1),
			func(r *schemas.BatchRecord) error { return fed(r, 1, 3, 40, []int64{2, 4}, 0, now) },
			func() schemas.BatchRecord {
				r := rec(schemas.BatchRunning, 5, 3, 4, 1, 2, 4)
				r.NextSeq = 40
				return r
			}(), nil},
		{"feed from a stale cursor", rec(schemas.BatchRunning, 5, 2, 2, 1, 2),
			func(r *schemas.BatchRecord) error { return fed(r, 1, 1, 40, []int64{2}, 0, now) },
			rec(schemas.BatchRunning, 5, 2, 2, 1, 2), errStale},
		{"feed into a cancelled batch", rec(schemas.BatchCancelled, 5, 0, 0),
			func(r *schemas.BatchRecord) error { return fed(r, 0, 1, 4, []int64{1}, 0, now) },
			rec(schemas.BatchCancelled, 5, 0, 0), errStale},
		{"an unreadable stored line counts failed", rec(schemas.BatchRunning, 2, 0, 0),
			func(r *schemas.BatchRecord) error { return fed(r, 0, 1, 9, nil, 1, now) },
			func() schemas.BatchRecord {
				r := rec(schemas.BatchRunning, 2, 0, 1)
				r.NextSeq, r.Counts.Failed = 9, 1
				return r
			}(), nil},
		{"count outcomes once", rec(schemas.BatchRunning, 6, 3, 3, 1, 2, 3),
			func(r *schemas.BatchRecord) error {
				counted(r, map[int64]outcome{1: outcomeCompleted, 3: outcomeFailed, 5: outcomeCompleted}, now)
				counted(r, map[int64]outcome{1: outcomeCompleted}, now) // again: nothing
				return nil
			},
			func() schemas.BatchRecord {
				r := rec(schemas.BatchRunning, 6, 3, 3, 2)
				r.Counts.Completed, r.Counts.Failed = 1, 1
				return r
			}(), nil},
		{"the last outcome completes the batch", rec(schemas.BatchRunning, 2, 2, 2, 2),
			func(r *schemas.BatchRecord) error {
				counted(r, map[int64]outcome{2: outcomeCancelled}, now)
				return nil
			},
			func() schemas.BatchRecord {
				r := rec(schemas.BatchCompleted, 2, 2, 2)
				r.Counts.Cancelled, r.CompletedAt = 1, &now
				return r
			}(), nil},
		{"the last outcome of a cancelling batch cancels it", rec(schemas.BatchCancelling, 5, 2, 2, 2),
			func(r *schemas.BatchRecord) error {
				counted(r, map[int64]outcome{2: outcomeCompleted}, now)
				return nil
			},
			func() schemas.BatchRecord {
				r := rec(schemas.BatchCancelled, 5, 2, 2)
				r.Counts.Completed, r.Counts.Cancelled, r.CompletedAt = 1, 3, &now
				return r
			}(), nil},
		{"cancel a queued batch", rec(schemas.BatchQueued, 3, 0, 0),
			func(r *schemas.BatchRecord) error { cancelRecord(r, now); return nil },
			func() schemas.BatchRecord {
				r := rec(schemas.BatchCancelled, 3, 0, 0)
				r.Counts.Cancelled, r.CompletedAt = 3, &now
				return r
			}(), nil},
		{"cancel a running batch: its runner ends it", rec(schemas.BatchRunning, 3, 0, 0),
			func(r *schemas.BatchRecord) error { cancelRecord(r, now); return nil },
			rec(schemas.BatchCancelling, 3, 0, 0), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.in
			got.Pending = slices.Clone(tt.in.Pending)
			err := tt.do(&got)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			got.UpdatedAt = time.Time{}
			if len(got.Pending) == 0 {
				got.Pending = nil
			}
			if !equalRecords(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if err == nil {
				if verr := got.Validate(); verr != nil {
					t.Errorf("Validate: %v", verr)
				}
			}
		})
	}
}

func equalRecords(a, b schemas.BatchRecord) bool {
	if (a.CompletedAt == nil) != (b.CompletedAt == nil) || a.CompletedAt != nil && !a.CompletedAt.Equal(*b.CompletedAt) {
		return false
	}
	a.CompletedAt, b.CompletedAt = nil, nil
	return a.ID == b.ID && a.State == b.State && a.Counts == b.Counts && a.Cursor == b.Cursor &&
		a.NextSeq == b.NextSeq && slices.Equal(a.Pending, b.Pending)
}

// A report's state maps to one count; states that have not ended to none.
func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	for state, want := range map[string]outcome{
		schemas.StateSolved: outcomeCompleted, schemas.StateUnsolved: outcomeCompleted, schemas.StateNoConsensus: outcomeCompleted,
		schemas.StateFailed: outcomeFailed, schemas.StateCancelled: outcomeCancelled,
		schemas.StateRunning: 0, schemas.StatePaused: 0, schemas.StateBudgetExhausted: 0, schemas.StateQueued: 0,
	} {
		if got := outcomeOf(state); got != want {
			t.Errorf("outcomeOf(%s) = %d, want %d", state, got, want)
		}
	}
}

// readLine keeps a line up to max bytes (a CR before the LF dropped), and
// skips the rest of a longer one, whatever the reader's buffer size.
func TestReadLine(t *testing.T) {
	t.Parallel()
	const max = 10
	in := "short\r\n" + "exactly10!\n" + "exactly10!\r\n" + "eleven byte\n" + strings.Repeat("x", 100) + "\n\nlast"
	want := []struct {
		line    string
		tooLong bool
	}{{"short", false}, {"exactly10!", false}, {"exactly10!", false}, {"", true}, {"", true}, {"", false}, {"last", false}}
	for _, size := range []int{16, 4096} {
		br := bufio.NewReaderSize(strings.NewReader(in), size)
		for i, w := range want {
			line, tooLong, err := readLine(br, nil, max)
			if string(line) != w.line || tooLong != w.tooLong {
				t.Errorf("buffer %d, line %d: %q, too long %v; want %q, %v", size, i+1, line, tooLong, w.line, w.tooLong)
			}
			if last := i == len(want)-1; last != (err == io.EOF) || err != nil && err != io.EOF {
				t.Errorf("buffer %d, line %d: err %v", size, i+1, err)
			}
		}
	}
}
