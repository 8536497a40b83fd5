package schemas_test

import (
	"math"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// TestValidateSpeculation: hostile speculation fields of a spec and the
// branch of a sample are refused, naming the field; a sample id must carry
// its branch.
func TestValidateSpeculation(t *testing.T) {
	t.Parallel()
	type (
		S   = *schemas.JobSpec
		Rq  = *schemas.SampleRequest
		Res = *schemas.SampleResult
	)
	spec, req, res := schemas.KindJobSpec, schemas.KindSampleRequest, schemas.KindSampleResult
	for _, tc := range []struct {
		name string
		m    func(t *testing.T) schemas.Message
		msg  string
	}{
		{"depth negative", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.SpeculationDepth = -1 }) }, "speculation_depth must be between 0 (off) and 64, got -1"},
		{"depth huge", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.SpeculationDepth = 1 << 40 }) }, "speculation_depth"},
		{"waste NaN", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.SpeculationMaxWaste = math.NaN() })
		}, "speculation_max_waste must be in (0, 1], got NaN"},
		{"waste above 1", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.SpeculationMaxWaste = 1.5 }) }, "got 1.5"},
		{"waste negative", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.SpeculationMaxWaste = -0.1 }) }, "got -0.1"},
		{"request branch negative", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Branch = -3 })
		}, "branch"},
		{"request branch without its id", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Branch = 7 })
		}, "does not match its fields"},
		{"result branch forged", func(t *testing.T) schemas.Message {
			return mutate(t, res, func(r Res) { r.Branch = 2 })
		}, "does not match its fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.m(t).Validate()
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Validate: %v, want an error containing %q", err, tc.msg)
			}
		})
	}
	// A speculative sample's id carries its branch, and validates.
	ok := mutate(t, req, func(r Rq) {
		r.Branch = 9
		r.SampleID = schemas.BranchSampleID(r.Tenant, r.JobID, r.Step, r.Epoch, r.Index, r.Attempt, 9)
	})
	if err := ok.Validate(); err != nil || !strings.HasSuffix(ok.(Rq).SampleID, "/b9") {
		t.Errorf("speculative request: %v (id %s)", err, ok.(Rq).SampleID)
	}
}
