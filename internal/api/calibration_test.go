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
