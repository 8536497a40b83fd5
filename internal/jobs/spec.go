package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/schemas"
)

// FieldDiff is one field in which two job specs differ: its JSON name and
// each spec's value, as JSON ("" when the spec leaves it out).
type FieldDiff struct {
	Field string
	A, B  string
}

// SpecDiff lists the fields in which job specs a and b differ, in the
// spec's field order: everything that makes the job, with defaults applied
// and JSON compared by value (params spelt otherwise are the same params),
// but not when it was submitted or the message header. Empty when a and b
// are the same job.
func SpecDiff(a, b schemas.JobSpec) ([]FieldDiff, error) {
	fa, err := specFields(a)
	if err != nil {
		return nil, err
	}
	fb, err := specFields(b)
	if err != nil {
		return nil, err
	}
	var diffs []FieldDiff
	seen := map[string]bool{}
	for _, f := range append(fa.order, fb.order...) {
		if seen[f] {
			continue
		}
		seen[f] = true
		if va, vb := fa.values[f], fb.values[f]; va != vb {
			diffs = append(diffs, FieldDiff{Field: f, A: va, B: vb})
		}
	}
	return diffs, nil
}

// fields is a spec's top-level JSON fields, values in canonical JSON.
type fields struct {
	order  []string
	values map[string]string
}

func specFields(s schemas.JobSpec) (fields, error) {
	s.ApplyDefaults()
	// Bookkeeping, not the job: when it was submitted, and the wire header.
	s.Header, s.SubmittedAt = schemas.Header{}, time.Time{}
	data, err := json.Marshal(&s)
	if err != nil {
		return fields{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return fields{}, err
	}
	f := fields{values: map[string]string{}}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fields{}, err
		}
		key, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return fields{}, fmt.Errorf("%w: spec field %s: %w", ErrInvalid, key, err)
		}
		if key == "version" || key == "kind" || key == "submitted_at" {
			continue
		}
		canon, err := json.Marshal(v) // sorted keys, one spelling per number
		if err != nil {
			return fields{}, err
		}
		f.order = append(f.order, key)
		f.values[key] = string(canon)
	}
	return f, nil
}

// conflictErr is the ErrConflict error for a job id registered (or
// reported) as cur, asked for as next: it names each field that differs.
func conflictErr(tenant, job string, diffs []FieldDiff) error {
	parts := make([]string, len(diffs))
	for i, d := range diffs {
		parts[i] = fmt.Sprintf("%s %s (this one: %s)", d.Field, orNone(d.A), orNone(d.B))
	}
	return fmt.Errorf("%w: %s/%s is registered with %s; choose another job id",
		ErrConflict, tenant, job, strings.Join(parts, ", "))
}

func orNone(v string) string {
	if v == "" {
		return "none"
	}
	return v
}
