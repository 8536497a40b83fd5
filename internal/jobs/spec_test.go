package jobs_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestSpecDiff: two specs are the same job when everything but when they
// were submitted (and the header) is the same, defaults applied and JSON
// compared by value; otherwise every field that differs is named, in the
// spec's field order, with both values.
func TestSpecDiff(t *testing.T) {
	t.Parallel()
	base := func() schemas.JobSpec {
		s := hanoiSpec("x", 4, 2)
		s.SubmittedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		s.ApplyDefaults()
		return s
	}
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name   string
		change func(*schemas.JobSpec)
		want   []jobs.FieldDiff
	}{
		{"identical", func(*schemas.JobSpec) {}, nil},
		{"submitted later", func(s *schemas.JobSpec) { s.SubmittedAt = s.SubmittedAt.Add(time.Hour) }, nil},
		{"no header", func(s *schemas.JobSpec) { s.Header = schemas.Header{} }, nil},
		{"params spelt otherwise", func(s *schemas.JobSpec) { s.Params = json.RawMessage(`{ "disks" : 4.0 }`) }, nil},
		{"defaults left out", func(s *schemas.JobSpec) {
			s.MaxSamplesPerStep, s.MaxOutputTokens, s.TemperatureRest, s.SampleTimeoutMS, s.ValidFraction = 0, 0, nil, 0, 0
		}, nil},
		{"seed", func(s *schemas.JobSpec) { s.Seed = 8 }, []jobs.FieldDiff{{Field: "seed", A: "0", B: "8"}}},
		{"max samples", func(s *schemas.JobSpec) { s.MaxSamplesPerStep = 50 },
			[]jobs.FieldDiff{{Field: "max_samples_per_step", A: "100", B: "50"}}},
		{"temperatures", func(s *schemas.JobSpec) { s.TemperatureFirst, s.TemperatureRest = 0.2, f(0.3) }, []jobs.FieldDiff{
			{Field: "temperature_first", A: "0", B: "0.2"}, {Field: "temperature_rest", A: "0.1", B: "0.3"}}},
		{"params and k", func(s *schemas.JobSpec) { s.Params, s.K = json.RawMessage(`{"disks":5}`), 3 }, []jobs.FieldDiff{
			{Field: "params", A: `{"disks":4}`, B: `{"disks":5}`}, {Field: "k", A: "2", B: "3"}}},
		{"pricing added", func(s *schemas.JobSpec) { s.Pricing = &schemas.Pricing{InputUSDPerMTok: 1} }, []jobs.FieldDiff{
			{Field: "pricing", A: "", B: `{"input_usd_per_mtok":1,"output_usd_per_mtok":0}`}}},
		{"escalation", func(s *schemas.JobSpec) { s.Escalation = &schemas.EscalationPolicy{StrongerModel: "big"} }, []jobs.FieldDiff{
			{Field: "escalation", A: "", B: `{"stronger_model":"big"}`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, b := base(), base()
			tt.change(&b)
			got, err := jobs.SpecDiff(a, b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SpecDiff = %+v, want %+v", got, tt.want)
			}
		})
	}
}
