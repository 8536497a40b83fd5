package schemas

import (
	"math"
	"slices"
	"strings"
)

// Reliability and decorrelation bounds and defaults (JobSpec, SampleRequest,
// Receipt).
const (
	// DefaultKFloor is a reliability-target job's k_floor when omitted: 2,
	// the smallest margin at which a step is a vote. At k = 1 the first
	// valid sample decides, so a step shows no disagreement and teaches
	// the job's estimate of p nothing.
	DefaultKFloor = 2
	// MaxPromptVariant bounds SampleRequest.PromptVariant: the paraphrases
	// a voter knows (task.Paraphrase).
	MaxPromptVariant = 8
	// MaxJobModels bounds JobSpec.Models.
	MaxJobModels = 8
	// MaxHistogramBuckets bounds each of a receipt's histograms; the
	// buckets widen with the value (exact to 16, then about ×1.5 each), so
	// 64 reach far beyond any sample cap.
	MaxHistogramBuckets = 64
)

// JobSpec.Decorrelate modes.
const (
	// DecorrelateAuto (or empty): on for a job with a reliability target,
	// off for a fixed-k job.
	DecorrelateAuto = "auto"
	DecorrelateOn   = "on"
	DecorrelateOff  = "off"
)

// Decorrelating reports whether the job decorrelates the rest of a step
// flagged as correlated (Decorrelate, auto by default).
func (s *JobSpec) Decorrelating() bool {
	switch s.Decorrelate {
	case DecorrelateOn:
		return true
	case DecorrelateOff:
		return false
	}
	return s.ReliabilityTarget > 0
}

// Floor is the job's k_floor, or its default: DefaultKFloor, within the
// sample cap.
func (s *JobSpec) Floor() int {
	if s.KFloor > 0 {
		return s.KFloor
	}
	return max(1, min(DefaultKFloor, s.MaxSamplesPerStep))
}

// checkReliability validates the reliability and decorrelation fields of
// a job spec (message kind k).
func (s *JobSpec) checkReliability(k string) error {
	t := s.ReliabilityTarget
	if t != 0 && !(t > 0 && t < 1) { // NaN and ±Inf too
		return invalid(k, "reliability_target must be in (0, 1) (the wanted chance that every step is right), got %v", t)
	}
	if s.KFloor != 0 {
		if t == 0 {
			return invalid(k, "k_floor needs reliability_target: a fixed-k job has no floor to keep")
		}
		if hi := min(MaxK, s.MaxSamplesPerStep); s.KFloor < 1 || s.KFloor > hi {
			return invalid(k, "k_floor must be between 1 and %d (k's limit and max_samples_per_step), got %d", hi, s.KFloor)
		}
	}
	switch s.Decorrelate {
	case "", DecorrelateAuto, DecorrelateOn, DecorrelateOff:
	default:
		return invalid(k, "decorrelate must be %s, %s or %s, got %q", DecorrelateAuto, DecorrelateOn, DecorrelateOff, s.Decorrelate)
	}
	if dt := s.DecorrelateTemperature; dt != 0 && !(dt > 0 && dt <= MaxTemperature) {
		return invalid(k, "decorrelate_temperature must be in (0, %d] (0: the rest temperature), got %v", MaxTemperature, dt)
	}
	if len(s.Models) > MaxJobModels {
		return invalid(k, "models lists at most %d models, got %d", MaxJobModels, len(s.Models))
	}
	for i, m := range s.Models {
		if m == "" || len(m) > maxModelName || strings.TrimSpace(m) != m {
			return invalid(k, "models[%d] %q must be a model name of 1-%d bytes without spaces around", i, m, maxModelName)
		}
	}
	return nil
}

// Receipt is a job report's reliability receipt: what the job's own votes
// say about p (the chance one valid vote of the job's model is right), the
// margin k each step was decided at, and the lower bound on P(every step
// right) those margins achieve at that p, with the evidence behind it in a
// bounded form (histograms and the exceptional steps; the decision journal
// holds every step). Every report of a job that ran has one, fixed k or
// adaptive (docs/statistics.md). A checkpoint carries the running receipt,
// so a new owner goes on with the same estimate and k schedule.
type Receipt struct {
	// PHat is the estimate of p from the votes of the steps the job's
	// own model decided, each step's winner taken as right: its votes
	// right, every other valid vote wrong (steps decided at k = 1 show no
	// disagreement, and correlated steps fail the test of independent
	// votes: both are left out). PLow and PHigh bound it, a Wilson score interval at
	// Confidence (two-sided); the prior (PriorP, worth PriorWeight votes,
	// from the job's p_estimate) is part of all three.
	PHat       float64 `json:"p_hat"`
	PLow       float64 `json:"p_low"`
	PHigh      float64 `json:"p_high"`
	Confidence float64 `json:"confidence"`
	// RightVotes and WrongVotes are the votes behind PHat, from
	// EvidenceSteps steps (the job's own model's, decided by votes).
	RightVotes    int64 `json:"right_votes"`
	WrongVotes    int64 `json:"wrong_votes"`
	EvidenceSteps int64 `json:"evidence_steps"`
	// Samples and Valid are those steps' counted samples and valid votes:
	// the valid fraction the correlation test expects.
	Samples int64 `json:"samples"`
	Valid   int64 `json:"valid"`
	// PriorP and PriorWeight: the prior estimate (the job's p_estimate)
	// and how many votes it counts as; absent without an estimate.
	PriorP      float64 `json:"prior_p,omitempty"`
	PriorWeight float64 `json:"prior_weight,omitempty"`
	// Target is the job's reliability_target, KFloor its floor (absent for
	// a fixed-k job).
	Target float64 `json:"target,omitempty"`
	KFloor int     `json:"k_floor,omitempty"`
	// KSchedule is the margin of every decided step as runs of equal k, in
	// step order: the first MaxListedSteps-1 runs and the last one;
	// KRunsUnlisted counts the runs between them left out.
	KSchedule     []KRun `json:"k_schedule"`
	KRunsUnlisted int64  `json:"k_runs_unlisted,omitempty"`
	// KSteps counts the steps the bound covers by the k they were decided
	// at, smallest k first (one entry per k used, at most MaxK).
	KSteps []KCount `json:"k_steps"`
	// BoundAchieved is Π p_vote(PLow, k) over the BoundSteps steps decided
	// by the job's own votes: the lower bound on P(all of them right), at
	// Confidence, under the formulas' worst case (every wrong vote the
	// same) and independent votes. OtherSteps are outside it: decided
	// otherwise (the stronger model, the judge's panel, a person) or
	// correlated (listed in Steps).
	BoundAchieved float64 `json:"bound_achieved"`
	BoundSteps    int64   `json:"bound_steps"`
	OtherSteps    int64   `json:"other_steps,omitempty"`
	// CorrelatedSteps counts decided steps that ran past the samples a
	// step needs with chance 1 − FalseAlarmRate at PLow (the test of
	// docs/statistics.md); DecorrelatedSamples the samples of theirs drawn
	// with a paraphrased prompt (and the job's decorrelation temperature
	// and models). Copies of the report's figures of the same names.
	CorrelatedSteps     int64   `json:"correlated_steps"`
	DecorrelatedSamples int64   `json:"decorrelated_samples"`
	FalseAlarmRate      float64 `json:"false_alarm_rate"`
	// VotesHistogram counts decided steps by their valid votes,
	// DissentHistogram by their votes for candidates other than the
	// winner, RedFlagHistogram by their red-flagged samples (the deciding
	// rung's).
	VotesHistogram   []Bucket `json:"votes_histogram"`
	DissentHistogram []Bucket `json:"dissent_histogram"`
	RedFlagHistogram []Bucket `json:"red_flag_histogram"`
	// Steps lists the exceptional steps (correlated, escalated or decided
	// by the panel or a person), the first MaxListedSteps of them;
	// StepsUnlisted counts the others.
	Steps         []ReceiptStep `json:"steps,omitempty"`
	StepsUnlisted int64         `json:"steps_unlisted,omitempty"`
	// FullRecord says where every step's votes, tally and red flags are.
	FullRecord string `json:"full_record,omitempty"`
}

// KRun is a run of consecutive decided steps, FromStep to ToStep, decided
// at margin K.
type KRun struct {
	FromStep int64 `json:"from_step"`
	ToStep   int64 `json:"to_step"`
	K        int   `json:"k"`
}

// KCount is how many steps were decided at margin K.
type KCount struct {
	K     int   `json:"k"`
	Steps int64 `json:"steps"`
}

// Bucket counts Steps whose value lies in [Lo, Hi].
type Bucket struct {
	Lo    int   `json:"lo"`
	Hi    int   `json:"hi"`
	Steps int64 `json:"steps"`
}

// ReceiptStep is one exceptional step of a receipt.
type ReceiptStep struct {
	// Step is the step, K its margin.
	Step int64 `json:"step"`
	K    int   `json:"k"`
	// Counted, Valid and RedFlagged are the job's own model's samples of
	// the step; Votes the winner's valid votes and Lead its margin (0 for
	// a step the own model did not decide).
	Counted    int `json:"counted"`
	Valid      int `json:"valid"`
	RedFlagged int `json:"red_flagged"`
	Votes      int `json:"votes"`
	Lead       int `json:"lead"`
	// Candidates is how many different answers the deciding rung saw.
	Candidates int `json:"candidates"`
	// Rung is who decided, as in a journal entry ("" for the job's own
	// model).
	Rung string `json:"rung,omitempty" jsonschema:"enum=,enum=stronger_model,enum=panel,enum=person"`
	// Correlated says the step failed the correlation test; Decorrelated
	// counts its samples drawn decorrelated.
	Correlated   bool `json:"correlated,omitempty"`
	Decorrelated int  `json:"decorrelated,omitempty"`
}

// check validates a receipt in a message of kind k, field names under
// prefix.
func (r *Receipt) check(k, prefix string) error {
	p := func(name string) string { return prefix + name }
	for _, f := range []figure{
		{p("p_hat"), r.PHat}, {p("p_low"), r.PLow}, {p("p_high"), r.PHigh}, {p("confidence"), r.Confidence},
		{p("prior_p"), r.PriorP}, {p("target"), r.Target}, {p("bound_achieved"), r.BoundAchieved},
		{p("false_alarm_rate"), r.FalseAlarmRate},
	} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > 1 {
			return invalid(k, "%s must be in [0, 1], got %v", f.name, f.v)
		}
	}
	if !(r.PLow <= r.PHat && r.PHat <= r.PHigh) {
		return invalid(k, "%sp_low %v <= p_hat %v <= p_high %v does not hold", prefix, r.PLow, r.PHat, r.PHigh)
	}
	if err := nonNegativeFigures(k, figure{p("prior_weight"), r.PriorWeight}); err != nil {
		return err
	}
	if err := nonNegative(k,
		count{p("right_votes"), r.RightVotes}, count{p("wrong_votes"), r.WrongVotes},
		count{p("evidence_steps"), r.EvidenceSteps}, count{p("samples"), r.Samples}, count{p("valid"), r.Valid},
		count{p("k_floor"), int64(r.KFloor)}, count{p("k_runs_unlisted"), r.KRunsUnlisted},
		count{p("bound_steps"), r.BoundSteps}, count{p("other_steps"), r.OtherSteps},
		count{p("correlated_steps"), r.CorrelatedSteps}, count{p("decorrelated_samples"), r.DecorrelatedSamples},
		count{p("steps_unlisted"), r.StepsUnlisted},
	); err != nil {
		return err
	}
	if r.Valid > r.Samples || r.RightVotes+r.WrongVotes > r.Valid {
		return invalid(k, "%sright_votes (%d) + wrong_votes (%d) <= valid (%d) <= samples (%d) does not hold",
			prefix, r.RightVotes, r.WrongVotes, r.Valid, r.Samples)
	}
	if len(r.KSchedule) > MaxListedSteps || len(r.Steps) > MaxListedSteps || len(r.KSteps) > MaxK {
		return invalid(k, "%sk_schedule and steps list at most %d entries each, k_steps at most %d", prefix, MaxListedSteps, MaxK)
	}
	last := int64(-1)
	for i, run := range r.KSchedule {
		if run.K < 1 || run.K > MaxK || run.FromStep <= last || run.ToStep < run.FromStep {
			return invalid(k, "%sk_schedule[%d] must be a run of steps after the one before with k in [1, %d], got %+v", prefix, i, MaxK, run)
		}
		last = run.ToStep
	}
	var covered int64
	for i, c := range r.KSteps {
		if c.K < 1 || c.K > MaxK || c.Steps < 1 || i > 0 && c.K <= r.KSteps[i-1].K {
			return invalid(k, "%sk_steps[%d] must be a k in [1, %d], above the one before, with steps >= 1, got %+v", prefix, i, MaxK, c)
		}
		covered += c.Steps
	}
	if covered != r.BoundSteps {
		return invalid(k, "%sk_steps add up to %d steps, not bound_steps %d", prefix, covered, r.BoundSteps)
	}
	for _, h := range []struct {
		name string
		b    []Bucket
	}{{"votes_histogram", r.VotesHistogram}, {"dissent_histogram", r.DissentHistogram}, {"red_flag_histogram", r.RedFlagHistogram}} {
		if len(h.b) > MaxHistogramBuckets {
			return invalid(k, "%s%s has at most %d buckets, got %d", prefix, h.name, MaxHistogramBuckets, len(h.b))
		}
		for i, b := range h.b {
			if b.Lo < 0 || b.Hi < b.Lo || b.Steps < 1 || i > 0 && b.Lo <= h.b[i-1].Hi {
				return invalid(k, "%s%s[%d] must be a bucket above the one before with steps >= 1, got %+v", prefix, h.name, i, b)
			}
		}
	}
	for i, s := range r.Steps {
		if s.Step < 0 || s.K < 0 || s.K > MaxK || s.Counted < 0 || s.Valid < 0 || s.RedFlagged < 0 || s.Votes < 0 || s.Lead < 0 ||
			s.Candidates < 0 || s.Decorrelated < 0 {
			return invalid(k, "%ssteps[%d] holds a negative count or a k above %d: %+v", prefix, i, MaxK, s)
		}
		switch s.Rung {
		case "", RungStrongerModel, RungPanel, RungPerson:
		default:
			return invalid(k, "%ssteps[%d].rung is unknown: %q", prefix, i, s.Rung)
		}
	}
	return nil
}

// Clone returns a copy of r that shares no slice with it (nil for nil).
func (r *Receipt) Clone() *Receipt {
	if r == nil {
		return nil
	}
	c := *r
	c.KSchedule, c.KSteps, c.Steps = slices.Clone(r.KSchedule), slices.Clone(r.KSteps), slices.Clone(r.Steps)
	c.VotesHistogram, c.DissentHistogram = slices.Clone(r.VotesHistogram), slices.Clone(r.DissentHistogram)
	c.RedFlagHistogram = slices.Clone(r.RedFlagHistogram)
	return &c
}
