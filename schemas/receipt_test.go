package schemas_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// validReceipt is a receipt that validates.
func validReceipt() *schemas.Receipt {
	return &schemas.Receipt{
		PHat: 0.9, PLow: 0.85, PHigh: 0.93, Confidence: 0.99, RightVotes: 90, WrongVotes: 10, EvidenceSteps: 20,
		Samples: 104, Valid: 100, PriorP: 0.9, PriorWeight: 10, Target: 0.95, KFloor: 2,
		KSchedule: []schemas.KRun{{FromStep: 0, ToStep: 9, K: 4}, {FromStep: 10, ToStep: 20, K: 3}},
		KSteps:    []schemas.KCount{{K: 3, Steps: 10}, {K: 4, Steps: 10}}, BoundAchieved: 0.97, BoundSteps: 20, OtherSteps: 1,
		CorrelatedSteps: 1, DecorrelatedSamples: 2, FalseAlarmRate: 0.001,
		VotesHistogram:   []schemas.Bucket{{Lo: 3, Hi: 3, Steps: 19}, {Lo: 17, Hi: 24, Steps: 2}},
		DissentHistogram: []schemas.Bucket{}, RedFlagHistogram: []schemas.Bucket{{Lo: 0, Hi: 0, Steps: 21}},
		Steps:      []schemas.ReceiptStep{{Step: 7, K: 3, Counted: 20, Valid: 20, Votes: 11, Lead: 3, Candidates: 2, Correlated: true, Decorrelated: 2}},
		FullRecord: "the journal",
	}
}

// TestValidateReliability: the reliability fields of a spec, a request, a
// journal entry, a checkpoint and a report, one failing case per rule;
// NaN and ±Inf refused with the field named.
func TestValidateReliability(t *testing.T) {
	t.Parallel()
	type (
		S  = *schemas.JobSpec
		Rq = *schemas.SampleRequest
		E  = *schemas.JournalEntry
		C  = *schemas.Checkpoint
		R  = *schemas.JobReport
	)
	spec, req, entry, ckpt, report := schemas.KindJobSpec, schemas.KindSampleRequest, schemas.KindJournalEntry, schemas.KindCheckpoint, schemas.KindJobReport
	withTarget := func(s S) { s.ReliabilityTarget = 0.99 }
	rc := func(f func(*schemas.Receipt)) *schemas.Receipt { r := validReceipt(); f(r); return r }
	tests := []struct {
		name string
		m    func(t *testing.T) schemas.Message
		msg  string
	}{
		{"spec/target 1", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.ReliabilityTarget = 1 }) }, "reliability_target must be in (0, 1)"},
		{"spec/target negative", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.ReliabilityTarget = -0.5 }) }, "got -0.5"},
		{"spec/target NaN", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.ReliabilityTarget = math.NaN() })
		}, "reliability_target must be in (0, 1) (the wanted chance that every step is right), got NaN"},
		{"spec/target Inf", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.ReliabilityTarget = math.Inf(1) })
		}, "got +Inf"},
		{"spec/floor without target", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.KFloor = 2 }) }, "k_floor needs reliability_target"},
		{"spec/floor over the cap", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { withTarget(s); s.KFloor = s.MaxSamplesPerStep + 1 })
		}, "k_floor must be between 1 and 100"},
		{"spec/floor negative", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { withTarget(s); s.KFloor = -1 }) }, "got -1"},
		{"spec/decorrelate", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.Decorrelate = "maybe" }) }, `decorrelate must be auto, on or off, got "maybe"`},
		{"spec/decorrelate temperature", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.DecorrelateTemperature = 2.5 })
		}, "decorrelate_temperature must be in (0, 2]"},
		{"spec/decorrelate temperature NaN", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.DecorrelateTemperature = math.NaN() })
		}, "got NaN"},
		{"spec/models too many", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.Models = strings.Fields("a b c d e f g h i") })
		}, "models lists at most 8 models, got 9"},
		{"spec/model empty", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.Models = []string{"a", " "} })
		}, `models[1] " "`},
		{"request/prompt variant forged", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.PromptVariant = 99 }) }, "prompt_variant must be between 0 (the task's prompt) and 8, got 99"},
		{"request/prompt variant negative", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.PromptVariant = -1 }) }, "got -1"},
		{"entry/k", func(t *testing.T) schemas.Message { return mutate(t, entry, func(e E) { e.K = schemas.MaxK + 1 }) }, "k must be between 1 and 1000 (0: not recorded), got 1001"},
		{"checkpoint/receipt p", func(t *testing.T) schemas.Message {
			return mutate(t, ckpt, func(c C) { c.Receipt = rc(func(r *schemas.Receipt) { r.PLow = math.NaN() }) })
		}, "receipt.p_low must be in [0, 1], got NaN"},
		{"report/receipt interval", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.Receipt = rc(func(r *schemas.Receipt) { r.PLow = 0.95 }) })
		}, "receipt.p_low 0.95 <= p_hat 0.9 <= p_high 0.93 does not hold"},
		{"report/receipt votes", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.Receipt = rc(func(r *schemas.Receipt) { r.WrongVotes = 11 }) })
		}, "right_votes (90) + wrong_votes (11) <= valid (100)"},
		{"report/receipt schedule order", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.Receipt = rc(func(r *schemas.Receipt) { r.KSchedule[1].FromStep = 5 }) })
		}, "receipt.k_schedule[1] must be a run of steps after the one before"},
		{"report/receipt k steps sum", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.Receipt = rc(func(r *schemas.Receipt) { r.BoundSteps = 21 }) })
		}, "k_steps add up to 20 steps, not bound_steps 21"},
		{"report/receipt histogram", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.Receipt = rc(func(r *schemas.Receipt) { r.VotesHistogram[1].Lo = 2 }) })
		}, "receipt.votes_histogram[1] must be a bucket above the one before"},
		{"report/receipt too many steps", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) {
				r.Receipt = rc(func(r *schemas.Receipt) { r.Steps = make([]schemas.ReceiptStep, schemas.MaxListedSteps+1) })
			})
		}, "k_schedule and steps list at most 100 entries each"},
		{"report/receipt step rung", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.Receipt = rc(func(r *schemas.Receipt) { r.Steps[0].Rung = "oracle" }) })
		}, `receipt.steps[0].rung is unknown: "oracle"`},
		{"report/correlated figures", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.CorrelatedSteps = -1 })
		}, "correlated_steps must be >= 0, got -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.m(t).Validate()
			if !errors.Is(err, schemas.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Validate() = %v, want ErrInvalid containing %q", err, tc.msg)
			}
		})
	}
	// The valid ones.
	for name, m := range map[string]schemas.Message{
		"spec": mutate(t, spec, func(s S) {
			s.ReliabilityTarget, s.KFloor, s.Decorrelate, s.DecorrelateTemperature, s.Models = 0.99, 2, schemas.DecorrelateOn, 0.7, []string{"m1"}
		}),
		"request":    mutate(t, req, func(r Rq) { r.PromptVariant = schemas.MaxPromptVariant }),
		"entry":      mutate(t, entry, func(e E) { e.K = 3 }),
		"checkpoint": mutate(t, ckpt, func(c C) { c.Receipt = validReceipt() }),
		"report":     mutate(t, report, func(r R) { r.Receipt = validReceipt() }),
	} {
		if err := m.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestReliabilityDefaults: the floor's and decorrelation's defaults.
func TestReliabilityDefaults(t *testing.T) {
	t.Parallel()
	var s schemas.JobSpec
	s.MaxSamplesPerStep = 100
	if s.Floor() != schemas.DefaultKFloor || s.Decorrelating() {
		t.Errorf("no target: floor %d decorrelating %v; want %d, false", s.Floor(), s.Decorrelating(), schemas.DefaultKFloor)
	}
	s.ReliabilityTarget = 0.9
	if !s.Decorrelating() {
		t.Error("auto with a target: not decorrelating")
	}
	s.Decorrelate, s.KFloor = schemas.DecorrelateOff, 5
	if s.Decorrelating() || s.Floor() != 5 {
		t.Errorf("off, floor 5: decorrelating %v floor %d", s.Decorrelating(), s.Floor())
	}
	if c := validReceipt().Clone(); c.KSchedule == nil || &c.KSchedule[0] == &validReceipt().KSchedule[0] {
		t.Error("Clone shares or drops the schedule")
	}
}
