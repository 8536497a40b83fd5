package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/calibrate"
	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	hanoitask "github.com/makerfleet/makerfleet/task/hanoi"
)

// TestSubmitCalibrated: a job may name a stored calibration instead of
// p_estimate and valid_fraction, as the CLI's --calibration-model does;
// its forecast then takes p, the valid fraction and the tokens a call uses
// from it. A calibration the fleet does not hold, one of another prompt,
// or one beside p_estimate is refused (422) with nothing queued.
func TestSubmitCalibrated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{forecast: pricing.Forecast})
	c := storeCalibration(t, e)

	req := hanoi(4)
	req.Calibration = &schemas.CalibrationRef{Model: "gpt-cal"}
	got := e.submit(alpha, req)
	if got.Forecast == nil || !strings.Contains(got.Forecast.Basis, "p=0.95 from the job") ||
		!strings.Contains(got.Forecast.Basis, "valid fraction 0.9") || !strings.Contains(got.Forecast.Basis, "tokens per call from the job: 321 in, 45 out") {
		t.Errorf("forecast %+v, want p, the valid fraction and the tokens of the calibration", got.Forecast)
	}

	_, before := e.enqueued()
	for name, tc := range map[string]struct {
		edit func(*schemas.JobRequest)
		says string
	}{
		"unknown model": {func(r *schemas.JobRequest) { r.Calibration = &schemas.CalibrationRef{Model: "gpt-none"} }, "no calibration"},
		"other prompt": {func(r *schemas.JobRequest) {
			r.Calibration = &schemas.CalibrationRef{Model: "gpt-cal", PromptVersion: "0123456789ab"}
		}, "stored for prompts " + c.PromptVersion},
		"beside p_estimate": {func(r *schemas.JobRequest) {
			r.Calibration, r.PEstimate = &schemas.CalibrationRef{Model: "gpt-cal"}, 0.9
		}, "not both"},
		"no model":   {func(r *schemas.JobRequest) { r.Calibration = &schemas.CalibrationRef{} }, "model must name"},
		"long model": {func(r *schemas.JobRequest) { r.Calibration = &schemas.CalibrationRef{Model: strings.Repeat("m", 300)} }, "model must name"},
	} {
		r := hanoi(4)
		r.JobID = "refused-" + strings.ReplaceAll(name, " ", "-")
		tc.edit(&r)
		rep := e.json(http.MethodPost, "/v1/jobs", e.key[alpha], r)
		if rep.status != http.StatusUnprocessableEntity || !strings.Contains(string(rep.body), tc.says) || !strings.Contains(string(rep.body), "/calibration") {
			t.Errorf("%s: %d %s; want 422 on /calibration saying %q", name, rep.status, rep.body, tc.says)
		}
	}
	if _, after := e.enqueued(); after != before {
		t.Errorf("refused submissions queued %d jobs", after-before)
	}
}

// storeCalibration stores a calibration of hanoi (its current prompt) on
// "gpt-cal": p 0.95, valid fraction 0.9, 321 prompt and 45 completion
// tokens a call.
func storeCalibration(t *testing.T, e *apiEnv) schemas.Calibration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := calibrate.OpenBucket(ctx, e.fleet.JS, e.fleet.Topo.NS, true)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := hanoitask.New(4)
	if err != nil {
		t.Fatal(err)
	}
	c := schemas.Calibration{
		Header: schemas.NewHeader(schemas.KindCalibration), Task: "hanoi", Model: "gpt-cal",
		PromptVersion: calibrate.PromptVersion(task.Ref{Name: "hanoi"}, inst),
		Temperature:   0.1, MaxOutputTokens: 750, Samples: 200, Valid: 180, Right: 171,
		P: 0.95, PLow: 0.91, PHigh: 0.975, ValidFraction: 0.9, ValidLow: 0.85, ValidHigh: 0.94,
		PromptTokensMean: 321, CompletionTokensMean: 45, TokensPerCall: 366, RedFlags: map[string]int64{schemas.RedFlagParse: 20},
		Confidence: 0.95, Method: schemas.CalibrationClopperPearson, Seed: 1, MeasuredAt: time.Now().UTC(),
	}
	if err := calibrate.Put(ctx, kv, c); err != nil {
		t.Fatal(err)
	}

	return c
}

// TestBatchCalibrated: a batch line may name a calibration as a job
// request does; one the fleet does not hold, or one beside p_estimate,
// refuses that line (invalid_spec, in the error file) and the rest is
// kept.
func TestBatchCalibrated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	storeCalibration(t, e)
	body := strings.Join([]string{
		`{"custom_id":"a","task":"hanoi","params":{"disks":4},"k":2,"calibration":{"model":"gpt-cal"}}`,
		`{"custom_id":"b","task":"hanoi","params":{"disks":4},"k":2,"calibration":{"model":"gpt-none"}}`,
		`{"custom_id":"c","task":"hanoi","params":{"disks":4},"k":2,"p_estimate":0.9,"calibration":{"model":"gpt-cal"}}`,
	}, "\n") + "\n"
	r := e.do(http.MethodPost, "/v1/batches", e.key[alpha], "application/jsonl", strings.NewReader(body))
	var rec schemas.BatchRecord
	r.decode(t, http.StatusCreated, &rec)
	if rec.Counts.Total != 3 || rec.Counts.Valid != 1 || rec.Counts.Invalid != 2 {
		t.Fatalf("created %+v, want 1 valid line of 3", rec.Counts)
	}
	errs := jsonLines(t, e.json(http.MethodGet, "/v1/batches/"+rec.ID+"/errors", e.key[alpha], nil).body)
	if len(errs) != 2 || errs[0].CustomID != "b" || errs[1].CustomID != "c" {
		t.Fatalf("error file %+v, want lines b and c", errs)
	}
	for i, want := range []string{"no calibration", "not both"} {
		if e := errs[i].Error; e == nil || e.Code != schemas.BatchErrInvalidSpec || !strings.Contains(e.Message, want) {
			t.Errorf("line %s error %+v, want invalid_spec saying %q", errs[i].CustomID, e, want)
		}
	}
}
