package schemas_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// A batch line is read as strictly as a message: one JSON object, known
// keys only, matched case-sensitively, none repeated.
func TestDecodeBatchLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line string
		msg  string // "" for a valid line
	}{
		{`{"custom_id":"a","task":"hanoi","params":{"disks":3},"k":2}`, ""},
		{` {"custom_id":"a","task":"hanoi","params":{"disks":3},"k":2,"priority":0,"tenant":"acme"} `, ""},
		{`{"custom_id":"a","task":"hanoi","params":{"disks":3},"k":2}{}`, "trailing data"},
		{`{"custom_id":"a","task":"hanoi","params":{"disks":3},"k":2,"job_id":"x"}`, `unknown field "job_id"`},
		{`{"custom_id":"a","task":"hanoi","params":{"disks":3},"k":2,"batch_id":"x"}`, `unknown field "batch_id"`},
		{`{"custom_id":"a","task":"hanoi","params":{"disks":3},"k":2,"Task":"x"}`, `unknown field "Task"`},
		{`{"custom_id":"a","custom_id":"b","task":"hanoi","params":{},"k":2}`, `duplicate key "custom_id"`},
		{`{"custom_id":"a","task":"hanoi","params":{"disks":3,"disks":4},"k":2}`, `duplicate key "disks"`},
		{`[]`, "cannot unmarshal array"},
		{`"x"`, "cannot unmarshal string"},
		{`null`, "must be a JSON object"},
		{`{"custom_id":"a","k":"2"}`, "cannot unmarshal string"},
		{"{\"custom_id\":\"\xff\"}", "not UTF-8"},
	}
	for _, tt := range tests {
		l, err := schemas.DecodeBatchLine([]byte(tt.line))
		switch {
		case tt.msg == "" && err != nil:
			t.Errorf("%s: %v", tt.line, err)
		case tt.msg == "" && (l.CustomID != "a" || l.Task != "hanoi" || l.K != 2):
			t.Errorf("%s: read %+v", tt.line, l)
		case tt.msg != "" && (!errors.Is(err, schemas.ErrInvalid) || !strings.Contains(err.Error(), tt.msg)):
			t.Errorf("%s: err %v, want ErrInvalid saying %q", tt.line, err, tt.msg)
		}
	}
}

// A line's job is the caller's tenant's, with the batch's priority unless
// the line sets one (0 included).
func TestBatchLineSpec(t *testing.T) {
	t.Parallel()
	l, err := schemas.DecodeBatchLine([]byte(`{"custom_id":"a","task":"hanoi","params":{"disks":3},"k":2,"seed":-7,"tenant":"other"}`))
	if err != nil {
		t.Fatal(err)
	}
	s := l.Spec("acme", 5)
	if s.Tenant != "acme" || s.Priority != 5 || s.Seed != -7 || s.K != 2 || s.JobID != "" || s.BatchID != "" {
		t.Errorf("spec %+v", s)
	}
	zero := 0
	l.Priority = &zero
	if s := l.Spec("acme", 5); s.Priority != 0 {
		t.Errorf("a line's priority 0 became %d", s.Priority)
	}
}

func TestCheckCustomID(t *testing.T) {
	t.Parallel()
	for id, ok := range map[string]bool{
		"a": true, "req-1/ü": true, strings.Repeat("x", schemas.MaxCustomIDBytes): true,
		"": false, strings.Repeat("x", schemas.MaxCustomIDBytes+1): false, "a\nb": false, "a\u0000": false, "\xff": false,
	} {
		if err := schemas.CheckCustomID(id); (err == nil) != ok {
			t.Errorf("CheckCustomID(%q) = %v", id, err)
		}
	}
}

func TestValidBatchID(t *testing.T) {
	t.Parallel()
	for id, ok := range map[string]bool{
		"batch_a": true, "batch_mipq3xk2a1b2c3d4e5": true, "batch_" + strings.Repeat("a", 34): true,
		"batch_": false, "batch_" + strings.Repeat("a", 35): false, "batch_A": false, "batch_a-lease": false,
		"b_a": false, "batch_a.b": false, "": false,
	} {
		if err := schemas.ValidBatchID(id); (err == nil) != ok {
			t.Errorf("ValidBatchID(%q) = %v", id, err)
		}
	}
	if id := schemas.BatchJobID("batch_"+strings.Repeat("a", 34), 1_000_000); schemas.ValidJobID(id) != nil {
		t.Errorf("%s is not a job id", id)
	}
}

// Every rule of BatchRecord.Validate and BatchItem.Validate, one failing
// case each.
func TestValidateBatchRules(t *testing.T) {
	t.Parallel()
	type (
		R = *schemas.BatchRecord
		I = *schemas.BatchItem
	)
	now := time.Now()
	tests := []struct {
		name string
		m    func(t *testing.T) schemas.Message
		msg  string
	}{
		{"record/id", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.ID = "x" })
		}, `batch id "x"`},
		{"record/tenant", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.Tenant = "" })
		}, `tenant ""`},
		{"record/state", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.State = "done" })
		}, `state must be`},
		{"record/window 0", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.Window = 0 })
		}, "window must be between 1 and 1000"},
		{"record/priority", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.Priority = 10 })
		}, "priority must be between 0 and 9"},
		{"record/counts add up", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.Counts.Valid++ })
		}, "counts.valid 5 + counts.invalid 1 != counts.total 5"},
		{"record/submitted", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.Counts.Submitted = 5 })
		}, "counts.submitted 5 > counts.valid 4"},
		{"record/outcomes", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.Counts.Completed = 5 })
		}, "exceed counts.total"},
		{"record/negative count", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.Counts.Cancelled = -1 })
		}, "counts.cancelled must be >= 0"},
		{"record/cursor", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.Cursor = 6 })
		}, "cursor 6 beyond"},
		{"record/pending line", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.Pending = []int64{0} })
		}, "pending line 0"},
		{"record/completed_at", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.CompletedAt = &now })
		}, "completed_at is set exactly when"},
		{"record/ended without completed_at", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchRecord, func(r R) { r.State = schemas.BatchCompleted })
		}, "completed_at is set exactly when"},
		{"item/line", func(t *testing.T) schemas.Message { return mutate(t, schemas.KindBatchItem, func(i I) { i.Line = 0 }) }, "line must be >= 1"},
		{"item/neither", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchItem, func(i I) { i.Spec = nil })
		}, "exactly one of spec and error"},
		{"item/both", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchItem, func(i I) { i.Error = &schemas.BatchError{Code: "invalid_json", Message: "x"} })
		}, "exactly one of spec and error"},
		{"item/error code", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchItem, func(i I) { i.Spec, i.Error = nil, &schemas.BatchError{Code: "oops", Message: "x"} })
		}, `error.code "oops"`},
		{"item/error message", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchItem, func(i I) { i.Spec, i.Error = nil, &schemas.BatchError{Code: "invalid_json"} })
		}, "error.message must be"},
		{"item/another tenant's job", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchItem, func(i I) { i.Spec.Tenant = "other" })
		}, "spec must be job"},
		{"item/another line's job", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchItem, func(i I) { i.Line = 4 })
		}, "spec must be job"},
		{"item/custom_id", func(t *testing.T) schemas.Message {
			return mutate(t, schemas.KindBatchItem, func(i I) { i.CustomID = strings.Repeat("x", 257) })
		}, "custom_id must be at most 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.m(t).Validate()
			if !errors.Is(err, schemas.ErrInvalid) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Validate = %v, want ErrInvalid saying %q", err, tt.msg)
			}
		})
	}
}

// DecodeBatchLine never panics, and what it accepts has a checked custom_id
// or is refused by CheckCustomID, never both.
func FuzzDecodeBatchLine(f *testing.F) {
	f.Add([]byte(`{"custom_id":"a","task":"hanoi","params":{"disks":3},"k":2}`))
	f.Add([]byte(`{"custom_id":"a","custom_id":"b"}`))
	f.Add([]byte(`{"params":{"a":{"a":1,"a":2}}}`))
	f.Add([]byte("\xef\xbb\xbf{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := schemas.DecodeBatchLine(data)
		if err != nil {
			if !errors.Is(err, schemas.ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		_ = schemas.CheckCustomID(l.CustomID)
		s := l.Spec("acme", 0)
		_ = s.Validate()
	})
}
