package schemas_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// Every golden message is valid under its JSON Schema and Decode, and is
// canonical: Encode writes the same document (by meaning), so the file shows
// every field a real message carries.
func TestGolden(t *testing.T) {
	t.Parallel()
	for _, mt := range schemas.All() {
		t.Run(mt.Kind, func(t *testing.T) {
			t.Parallel()
			data := golden(t, mt.Kind)
			if err := validateSchema(t, mt.Kind, data); err != nil {
				t.Errorf("schema: %v", err)
			}
			m := mt.New()
			if err := schemas.Decode(data, m); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			enc, err := schemas.Encode(m)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if got, want := jsonValue(t, enc), jsonValue(t, data); !reflect.DeepEqual(got, want) {
				t.Errorf("golden file is not canonical:\nEncode: %s\nfile:   %s", enc, bytes.Join(bytes.Fields(data), nil))
			}
		})
	}
}

// Each invalid file fails Decode with a specific error. schema says what the
// JSON Schema makes of the file: "rejects", "accepts" (a rule only Decode
// and Validate know) or "" (the file is not one JSON document).
func TestInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file   string
		want   error
		msg    string
		schema string
	}{
		{"job_spec.wrong_version", schemas.ErrVersion, "unsupported version: 2", "rejects"},
		{"job_spec.version_string", schemas.ErrInvalid, "cannot unmarshal string", "rejects"},
		{"job_spec.wrong_kind", schemas.ErrKind, `got "job_report", want "job_spec"`, "rejects"},
		{"job_spec.unknown_field", schemas.ErrInvalid, `unknown field "urgency"`, "rejects"},
		{"job_spec.case_variant_key", schemas.ErrInvalid, `unknown field "K" (keys are case-sensitive)`, "rejects"},
		{"job_spec.duplicate_key", schemas.ErrInvalid, `duplicate key "k"`, "accepts"},
		{"job_spec.bad_tenant", schemas.ErrInvalid, `tenant "Acme Corp" must be`, "rejects"},
		{"job_spec.bad_job_id", schemas.ErrInvalid, `job id "hanoi/10" must be`, "rejects"},
		{"job_spec.k_zero", schemas.ErrInvalid, "k is missing", "rejects"},
		{"job_spec.params_not_object", schemas.ErrInvalid, "params must be a JSON object", "rejects"},
		{"job_spec.trailing_data", schemas.ErrInvalid, "trailing data", ""},
		{"job_spec.truncated", schemas.ErrInvalid, "unexpected end of JSON input", ""},
		{"sample_request.negative_index", schemas.ErrInvalid, "index must be >= 0, got -1", "rejects"},
		{"sample_request.sample_id_mismatch", schemas.ErrInvalid, `sample_id "acme/hanoi-10-k3/0/0/1/0" does not match its fields (want "acme/hanoi-10-k3/0/0/0/0")`, "accepts"},
		{"sample_result.red_flag_on_vote", schemas.ErrInvalid, "a vote has no red_flag", "rejects"},
		{"sample_result.negative_tokens", schemas.ErrInvalid, "completion_tokens must be >= 0, got -61", "rejects"},
		{"sample_result.not_utf8", schemas.ErrInvalid, "not UTF-8", ""},
		{"sample_request.missing_token", schemas.ErrInvalid, "token must be 22 characters of A-Z, a-z, 0-9, '-' and '_' (got 0 bytes)", "rejects"},
		{"sample_result.bad_token", schemas.ErrInvalid, "token must be 22 characters of A-Z, a-z, 0-9, '-' and '_' (got 40 bytes)", "rejects"},
		{"step_decided.lead_over_votes", schemas.ErrInvalid, "lead must be between 1 and votes (4), got 5", "accepts"},
		{"job_status.negative_count", schemas.ErrInvalid, "samples must be >= 0, got -1", "rejects"},
		{"job_report.solved_mismatch", schemas.ErrInvalid, "solved must be true exactly when state is solved", "rejects"},
		{"job_report.no_consensus_without_step", schemas.ErrInvalid, "a no_consensus report names the step", "rejects"},
		{"break_glass_request.bad_problem_type", schemas.ErrInvalid, `problem_type "poetry" is not one of`, "rejects"},
		{"break_glass_request.negative_budget", schemas.ErrInvalid, "budget_usd must be a finite number >= 0, got -1", "rejects"},
		{"break_glass_request.two_plugins", schemas.ErrInvalid, "plugins holds 2 entries", "accepts"},
		{"break_glass_response.confidence_over_one", schemas.ErrInvalid, "solution.confidence must be between 0 and 1, got 1.5", "rejects"},
		{"break_glass_response.refused_without_reason", schemas.ErrInvalid, "a refused outcome needs a reason", "accepts"},
		{"break_glass_audit.unknown_outcome", schemas.ErrInvalid, `unknown outcome "maybe"`, "rejects"},
		{"break_glass_approval.request_mismatch", schemas.ErrInvalid, "must match the held request's", "accepts"},
		{"approval_decision.bad_decision", schemas.ErrInvalid, `decision "maybe" is not approve or deny`, "rejects"},
		{"arbiter_decision.decided_without_vote_key", schemas.ErrInvalid, "a decided arbiter decision needs a vote_key", "rejects"},
		{"break_glass_request.arbitration_prefix", schemas.ErrInvalid, `the prefix "arbitration-" names arbitration requests`, "accepts"},
		{"arbitration_request.request_id_of_another_step", schemas.ErrInvalid, "is not the step's: want \"arbitration-b65a9cc926c109637e22352bc5939f95\"", "accepts"},
		{"arbitration_request.candidates_not_the_rungs", schemas.ErrInvalid, "candidates must be the rungs' tallies merged", "accepts"},
		{"arbitration_request.control_character_in_key", schemas.ErrInvalid, "candidates[2].vote_key holds a control character", "accepts"},
		{"arbitration_request.min_confidence_zero", schemas.ErrInvalid, "min_confidence must be in (0, 1], got 0", "rejects"},
		{"arbitration_response.decided_when_degraded", schemas.ErrInvalid, "only an answered response decides the step, not a degraded one", "accepts"},
		{"arbitration_response.held_without_reason", schemas.ErrInvalid, "a held response has a reason and no decision yet", "rejects"},
		{"control_request.bad_action", schemas.ErrInvalid, `action is pause, resume or cancel, got "restart"`, "rejects"},
		{"decide_request.negative_step", schemas.ErrInvalid, "step must be >= 0, got -1", "rejects"},
		{"control_reply.record_and_problem", schemas.ErrInvalid, "a reply holds either the record or a problem", "accepts"},
		{"dead_letter.truncated_without_hash", schemas.ErrInvalid, "a truncated dead letter needs the original's sequence, size and sha256", "accepts"},
		{"model_price.negative_price", schemas.ErrInvalid, "input_usd_per_mtok must be between 0 and 10000, got -5", "rejects"},
		{"model_price.default_with_model", schemas.ErrInvalid, `the default record names no model, got "openai/gpt-5.5"`, "accepts"},
	}
	listed := make(map[string]bool)
	for _, tt := range tests {
		listed[tt.file+".json"] = true
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			kind, _, _ := strings.Cut(tt.file, ".")
			data, err := os.ReadFile(filepath.Join("testdata", "invalid", tt.file+".json"))
			if err != nil {
				t.Fatal(err)
			}
			err = schemas.Decode(data, newMessage(t, kind))
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Decode = %v, want %v containing %q", err, tt.want, tt.msg)
			}
			switch serr := validateSchema(t, kind, data); tt.schema {
			case "rejects":
				if serr == nil {
					t.Error("the JSON Schema accepts it")
				}
			case "accepts":
				if serr != nil {
					t.Errorf("the JSON Schema rejects it: %v", serr)
				}
			}
		})
	}
	// Every file is in the table, so none goes untested.
	files, err := filepath.Glob(filepath.Join("testdata", "invalid", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s is not in the table", f)
		}
	}
}

// Oversize is built here rather than kept as a file over a megabyte.
func TestDecodeOversize(t *testing.T) {
	t.Parallel()
	data := append(golden(t, schemas.KindJobSpec), bytes.Repeat([]byte(" "), schemas.MaxMessageBytes)...)
	err := schemas.Decode(data, new(schemas.JobSpec))
	if !errors.Is(err, schemas.ErrInvalid) || !strings.Contains(err.Error(), "exceeds the 1048576-byte limit") {
		t.Errorf("Decode = %v, want the size limit", err)
	}
	// At the limit exactly, the same message is fine.
	data = data[:schemas.MaxMessageBytes]
	if err := schemas.Decode(data, new(schemas.JobSpec)); err != nil {
		t.Errorf("Decode at the limit: %v", err)
	}
}
