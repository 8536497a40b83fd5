package schemas_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/schemas"
)

// mutate returns kind's golden message changed by f, which takes the
// concrete pointer type.
func mutate[M schemas.Message](t *testing.T, kind string, f func(M)) schemas.Message {
	t.Helper()
	m := decodeGolden(t, kind).(M)
	f(m)
	return m
}

// Every rule of every Validate method, one failing case each.
func TestValidateRules(t *testing.T) {
	t.Parallel()
	const (
		spec   = schemas.KindJobSpec
		req    = schemas.KindSampleRequest
		res    = schemas.KindSampleResult
		dec    = schemas.KindStepDecided
		status = schemas.KindJobStatus
		report = schemas.KindJobReport
	)
	type (
		S  = *schemas.JobSpec
		Rq = *schemas.SampleRequest
		Rs = *schemas.SampleResult
		D  = *schemas.StepDecided
		St = *schemas.JobStatus
		R  = *schemas.JobReport
	)
	nan, inf := math.NaN(), math.Inf(1)
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name string
		m    func(t *testing.T) schemas.Message
		want error
		msg  string
	}{
		// Header, checked the same way by every kind.
		{"spec/kind", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.Kind = "job_status" }) }, schemas.ErrKind, `got "job_status", want "job_spec"`},
		{"spec/version", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.Version = 0 }) }, schemas.ErrVersion, "unsupported version: 0"},

		{"spec/job id", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.JobID = "" }) }, schemas.ErrInvalid, `job id "" must be`},
		{"spec/job id too long", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.JobID = strings.Repeat("j", 65) })
		}, schemas.ErrInvalid, "must be 1-64 characters"},
		{"spec/tenant", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.Tenant = "-acme" }) }, schemas.ErrInvalid, `tenant "-acme" must be`},
		{"spec/tenant empty", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.Tenant = "" }) }, schemas.ErrInvalid, `tenant "" must be`},
		{"spec/task", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.Task = "Hanoi" }) }, schemas.ErrInvalid, `task "Hanoi" is not a task name`},
		{"spec/params missing", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.Params = nil }) }, schemas.ErrInvalid, "params are missing"},
		{"spec/params null", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.Params = json.RawMessage("null") })
		}, schemas.ErrInvalid, "params are missing"},
		{"spec/params array", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.Params = json.RawMessage("[10]") })
		}, schemas.ErrInvalid, "params must be a JSON object"},
		{"spec/params broken", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.Params = json.RawMessage(`{"disks":`) })
		}, schemas.ErrInvalid, "params must be a JSON object"},
		{"spec/k 0", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.K = 0 }) }, schemas.ErrInvalid, "k is missing"},
		{"spec/k -1", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.K = -1 }) }, schemas.ErrInvalid, "k must be between 1 and 1000, got -1"},
		{"spec/k over", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.K = schemas.MaxK + 1 }) }, schemas.ErrInvalid, "got 1001"},
		{"spec/max samples under k", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.MaxSamplesPerStep = 2 })
		}, schemas.ErrInvalid, "max_samples_per_step must be between k (3) and 100000, got 2"},
		{"spec/max samples over", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.MaxSamplesPerStep = schemas.MaxSamplesLimit + 1 })
		}, schemas.ErrInvalid, "got 100001"},
		{"spec/max output tokens 0", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.MaxOutputTokens = 0 })
		}, schemas.ErrInvalid, "max_output_tokens must be between 1 and 1000000, got 0"},
		{"spec/max output tokens over", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.MaxOutputTokens = 1_000_001 })
		}, schemas.ErrInvalid, "got 1000001"},
		{"spec/temperature first", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.TemperatureFirst = 2.5 })
		}, schemas.ErrInvalid, "temperature_first must be between 0 and 2, got 2.5"},
		{"spec/temperature first NaN", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.TemperatureFirst = nan })
		}, schemas.ErrInvalid, "temperature_first must be between 0 and 2, got NaN"},
		{"spec/temperature rest", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.TemperatureRest = f(-0.1) })
		}, schemas.ErrInvalid, "temperature_rest must be between 0 and 2, got -0.1"},
		{"spec/sample timeout", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.SampleTimeoutMS = 9 })
		}, schemas.ErrInvalid, "sample_timeout_ms must be >= 10, got 9"},
		{"spec/p estimate low", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.PEstimate = 0.5 }) }, schemas.ErrInvalid, "p_estimate must be in (0.5, 1), got 0.5"},
		{"spec/p estimate high", func(t *testing.T) schemas.Message { return mutate(t, spec, func(s S) { s.PEstimate = 1 }) }, schemas.ErrInvalid, "p_estimate must be in (0.5, 1), got 1"},
		{"spec/valid fraction high", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.ValidFraction = 1.5 })
		}, schemas.ErrInvalid, "valid_fraction must be in (0, 1], got 1.5"},
		{"spec/valid fraction negative", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.ValidFraction = -0.5 })
		}, schemas.ErrInvalid, "valid_fraction must be in (0, 1], got -0.5"},
		{"spec/input price", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.Pricing.InputUSDPerMTok = -1 })
		}, schemas.ErrInvalid, "pricing.input_usd_per_mtok must be between 0 and 1e+06, got -1"},
		{"spec/output price", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) { s.Pricing.OutputUSDPerMTok = 2e6 })
		}, schemas.ErrInvalid, "pricing.output_usd_per_mtok must be between 0 and 1e+06, got 2e+06"},
		{"spec/stronger price", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) {
				s.Escalation = &schemas.EscalationPolicy{StrongerModel: "big", StrongerPricing: &schemas.Pricing{InputUSDPerMTok: math.NaN()}}
			})
		}, schemas.ErrInvalid, "escalation.stronger_pricing.input_usd_per_mtok must be between 0 and 1e+06, got NaN"},
		{"spec/stronger price without the model", func(t *testing.T) schemas.Message {
			return mutate(t, spec, func(s S) {
				s.Escalation = &schemas.EscalationPolicy{Panel: true, StrongerPricing: &schemas.Pricing{InputUSDPerMTok: 3}}
			})
		}, schemas.ErrInvalid, "escalation.stronger_pricing prices no stronger_model"},

		{"request/kind", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Kind = "sample_result" }) }, schemas.ErrKind, "want \"sample_request\""},
		{"request/tenant", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Tenant = "ACME" }) }, schemas.ErrInvalid, `tenant "ACME"`},
		{"request/job id", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.JobID = "a b" }) }, schemas.ErrInvalid, `job id "a b"`},
		{"request/step", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Step = -1 }) }, schemas.ErrInvalid, "step must be >= 0, got -1"},
		{"request/epoch", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Epoch = -1 }) }, schemas.ErrInvalid, "epoch must be >= 0, got -1"},
		{"request/index", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Index = -1 }) }, schemas.ErrInvalid, "index must be >= 0, got -1"},
		{"request/attempt", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Attempt = -1 }) }, schemas.ErrInvalid, "attempt must be >= 0, got -1"},
		{"request/sample id", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Attempt = 1 }) }, schemas.ErrInvalid, `sample_id "acme/hanoi-10-k3/0/0/0/0" does not match its fields (want "acme/hanoi-10-k3/0/0/0/1")`},
		{"request/task", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Task = "" }) }, schemas.ErrInvalid, `task "" is not a task name`},
		{"request/params", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Params = nil }) }, schemas.ErrInvalid, "params and state must be JSON"},
		{"request/state", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.State = json.RawMessage(`{"pegs":`) })
		}, schemas.ErrInvalid, "params and state must be JSON"},
		{"request/temperature", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Temperature = 2.1 }) }, schemas.ErrInvalid, "temperature must be between 0 and 2, got 2.1"},
		{"request/temperature NaN", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Temperature = nan }) }, schemas.ErrInvalid, "got NaN"},
		{"request/max output tokens", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.MaxOutputTokens = 0 })
		}, schemas.ErrInvalid, "max_output_tokens must be >= 1, got 0"},
		{"request/no token", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Token = "" }) }, schemas.ErrInvalid, "token must be 22 characters of A-Z, a-z, 0-9, '-' and '_' (got 0 bytes)"},
		{"request/short token", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Token = r.Token[1:] }) }, schemas.ErrInvalid, "(got 21 bytes)"},
		{"request/long token", func(t *testing.T) schemas.Message {
			return mutate(t, req, func(r Rq) { r.Token = strings.Repeat("A", 1<<16) })
		}, schemas.ErrInvalid, "(got 65536 bytes)"},
		{"request/token padded", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Token = r.Token[2:] + "==" }) }, schemas.ErrInvalid, "(got 22 bytes)"},
		{"request/token of std base64", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Token = r.Token[1:] + "+" }) }, schemas.ErrInvalid, "(got 22 bytes)"},
		{"request/token not ASCII", func(t *testing.T) schemas.Message { return mutate(t, req, func(r Rq) { r.Token = r.Token[2:] + "é" }) }, schemas.ErrInvalid, "(got 22 bytes)"},

		{"result/kind", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.Kind = "" }) }, schemas.ErrKind, `got "", want "sample_result"`},
		{"result/tenant", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.Tenant = "a_b" }) }, schemas.ErrInvalid, `tenant "a_b"`},
		{"result/job id", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.JobID = "_x" }) }, schemas.ErrInvalid, `job id "_x"`},
		{"result/step", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.Step = -3 }) }, schemas.ErrInvalid, "step must be >= 0, got -3"},
		{"result/sample id", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.SampleID = "x" }) }, schemas.ErrInvalid, `sample_id "x" does not match its fields`},
		{"result/vote without key", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.VoteKey = "" }) }, schemas.ErrInvalid, "a vote needs a vote_key"},
		{"result/vote with red flag", func(t *testing.T) schemas.Message {
			return mutate(t, res, func(r Rs) { r.RedFlag = schemas.RedFlagParse })
		}, schemas.ErrInvalid, "a vote has no red_flag"},
		{"result/red flag reason not a name", func(t *testing.T) schemas.Message {
			return mutate(t, res, func(r Rs) { r.Outcome, r.VoteKey, r.RedFlag = schemas.OutcomeRedFlag, "", "Rude Words!" })
		}, schemas.ErrInvalid, `red_flag "Rude Words!" is not a red flag reason`},
		{"result/red flag without reason", func(t *testing.T) schemas.Message {
			return mutate(t, res, func(r Rs) { r.Outcome, r.VoteKey = schemas.OutcomeRedFlag, "" })
		}, schemas.ErrInvalid, `red_flag "" is not a red flag reason`},
		{"result/red flag with key", func(t *testing.T) schemas.Message {
			return mutate(t, res, func(r Rs) { r.Outcome, r.RedFlag = schemas.OutcomeRedFlag, schemas.RedFlagLength })
		}, schemas.ErrInvalid, "a red-flagged sample has no vote_key"},
		{"result/skipped with key", func(t *testing.T) schemas.Message {
			return mutate(t, res, func(r Rs) { r.Outcome = schemas.OutcomeSkipped })
		}, schemas.ErrInvalid, "a skipped sample has no vote_key or red_flag"},
		{"result/cancelled with red flag", func(t *testing.T) schemas.Message {
			return mutate(t, res, func(r Rs) { r.Outcome, r.VoteKey, r.RedFlag = schemas.OutcomeCancelled, "", schemas.RedFlagEmpty })
		}, schemas.ErrInvalid, "a cancelled sample has no vote_key or red_flag"},
		{"result/unknown outcome", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.Outcome = "maybe" }) }, schemas.ErrInvalid, `unknown outcome "maybe"`},
		{"result/prompt tokens", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.PromptTokens = -1 }) }, schemas.ErrInvalid, "prompt_tokens must be >= 0, got -1"},
		{"result/completion tokens", func(t *testing.T) schemas.Message {
			return mutate(t, res, func(r Rs) { r.CompletionTokens = -1 })
		}, schemas.ErrInvalid, "completion_tokens must be >= 0, got -1"},
		{"result/token", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.Token = r.Token + "x" }) }, schemas.ErrInvalid, "token must be 22 characters of A-Z, a-z, 0-9, '-' and '_' (got 23 bytes)"},
		{"result/token with a slash", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.Token = r.Token[1:] + "/" }) }, schemas.ErrInvalid, "(got 22 bytes)"},
		{"result/latency", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.LatencyMS = -0.5 }) }, schemas.ErrInvalid, "latency_ms must be a finite number >= 0, got -0.5"},
		{"result/latency NaN", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.LatencyMS = nan }) }, schemas.ErrInvalid, "latency_ms must be a finite number >= 0, got NaN"},
		{"result/latency Inf", func(t *testing.T) schemas.Message { return mutate(t, res, func(r Rs) { r.LatencyMS = inf }) }, schemas.ErrInvalid, "got +Inf"},

		{"decided/kind", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.Version = 2 }) }, schemas.ErrVersion, "unsupported version: 2"},
		{"decided/tenant", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.Tenant = "" }) }, schemas.ErrInvalid, `tenant ""`},
		{"decided/job id", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.JobID = "" }) }, schemas.ErrInvalid, `job id ""`},
		{"decided/step", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.Step = -1 }) }, schemas.ErrInvalid, "step must be >= 0, got -1"},
		{"decided/epoch", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.Epoch = -1 }) }, schemas.ErrInvalid, "epoch must be >= 0, got -1"},
		{"decided/red flagged", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.RedFlagged = -1 }) }, schemas.ErrInvalid, "red_flagged must be >= 0, got -1"},
		{"decided/vote key", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.VoteKey = "" }) }, schemas.ErrInvalid, "a decision needs a vote_key"},
		{"decided/votes", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.Votes = 0 }) }, schemas.ErrInvalid, "votes must be >= 1, got 0"},
		{"decided/lead 0", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.Lead = 0 }) }, schemas.ErrInvalid, "lead must be between 1 and votes (4), got 0"},
		{"decided/lead over votes", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.Lead = 5 }) }, schemas.ErrInvalid, "got 5"},
		{"decided/samples", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.Samples = 4 }) }, schemas.ErrInvalid, "samples (4) must cover the winner's votes (4) plus red_flagged (1)"},
		{"decided/tally", func(t *testing.T) schemas.Message { return mutate(t, dec, func(d D) { d.Tally[1].Votes = -1 }) }, schemas.ErrInvalid, "tally[1].votes must be >= 0, got -1"},

		{"status/rung", func(t *testing.T) schemas.Message { return mutate(t, status, func(s St) { s.Rung = "own_model" }) }, schemas.ErrInvalid, `rung is stronger_model or panel, got "own_model"`},
		{"status/kind", func(t *testing.T) schemas.Message { return mutate(t, status, func(s St) { s.Kind = "job_report" }) }, schemas.ErrKind, `want "job_status"`},
		{"status/tenant", func(t *testing.T) schemas.Message {
			return mutate(t, status, func(s St) { s.Tenant = strings.Repeat("a", 33) })
		}, schemas.ErrInvalid, "must be 1-32 characters"},
		{"status/job id", func(t *testing.T) schemas.Message { return mutate(t, status, func(s St) { s.JobID = "é" }) }, schemas.ErrInvalid, `job id "é"`},
		{"status/state", func(t *testing.T) schemas.Message { return mutate(t, status, func(s St) { s.State = "halted" }) }, schemas.ErrInvalid, `unknown state "halted"`},
		{"status/steps", func(t *testing.T) schemas.Message { return mutate(t, status, func(s St) { s.Steps = -1 }) }, schemas.ErrInvalid, "steps must be >= 0, got -1"},

		{"report/stronger tokens over the total", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.StrongerPromptTokens = r.PromptTokens + 1 })
		}, schemas.ErrInvalid, "the stronger model's tokens"},
		{"report/arbiter cost", func(t *testing.T) schemas.Message { return mutate(t, report, func(r R) { r.ArbiterCostUSD = -1 }) }, schemas.ErrInvalid, "arbiter_cost_usd"},
		{"report/kind", func(t *testing.T) schemas.Message { return mutate(t, report, func(r R) { r.Kind = "job_spec" }) }, schemas.ErrKind, `want "job_report"`},
		{"report/tenant", func(t *testing.T) schemas.Message { return mutate(t, report, func(r R) { r.Tenant = "x/y" }) }, schemas.ErrInvalid, `tenant "x/y"`},
		{"report/job id", func(t *testing.T) schemas.Message { return mutate(t, report, func(r R) { r.JobID = "" }) }, schemas.ErrInvalid, `job id ""`},
		{"report/state not final", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.State = schemas.StateRunning })
		}, schemas.ErrInvalid, `state "running" is not a final state`},
		{"report/solved without state", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.State = schemas.StateFailed })
		}, schemas.ErrInvalid, "solved must be true exactly when state is solved"},
		{"report/state without solved", func(t *testing.T) schemas.Message { return mutate(t, report, func(r R) { r.Solved = false }) }, schemas.ErrInvalid, "solved must be true exactly when state is solved"},
		{"report/no consensus step", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.State, r.Solved = schemas.StateNoConsensus, false })
		}, schemas.ErrInvalid, "a no_consensus report names the step"},
		{"report/task", func(t *testing.T) schemas.Message { return mutate(t, report, func(r R) { r.Task = "9lives" }) }, schemas.ErrInvalid, `task "9lives" is not a task name`},
		{"report/params", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.Params = json.RawMessage("{") })
		}, schemas.ErrInvalid, "params must be JSON"},
		{"report/k", func(t *testing.T) schemas.Message { return mutate(t, report, func(r R) { r.K = 0 }) }, schemas.ErrInvalid, "k must be between 1 and 1000, got 0"},
		{"report/late samples", func(t *testing.T) schemas.Message { return mutate(t, report, func(r R) { r.LateSamples = -2 }) }, schemas.ErrInvalid, "late_samples must be >= 0, got -2"},
		{"report/error steps", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.ErrorSteps = []int64{4, -1} })
		}, schemas.ErrInvalid, "error_steps[1] must be >= 0, got -1"},
		{"report/red flags", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.RedFlags["parse"] = -16 })
		}, schemas.ErrInvalid, `red_flags["parse"] must be >= 0, got -16`},
		{"report/steps per second Inf", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.StepsPerSecond = inf })
		}, schemas.ErrInvalid, "steps_per_second must be a finite number >= 0, got +Inf"},
		{"report/votes per step NaN", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) { r.VotesPerStep = nan })
		}, schemas.ErrInvalid, "votes_per_step must be a finite number >= 0, got NaN"},
		{"report/p estimate", func(t *testing.T) schemas.Message { return mutate(t, report, func(r R) { r.PEstimate = 1.5 }) }, schemas.ErrInvalid, "p_estimate must be <= 1, got 1.5"},
		{"report/no consensus negative", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) {
				r.State, r.Solved = schemas.StateNoConsensus, false
				r.NoConsensus = &schemas.NoConsensus{Step: -1}
			})
		}, schemas.ErrInvalid, "no_consensus.step must be >= 0, got -1"},
		{"report/no consensus tally", func(t *testing.T) schemas.Message {
			return mutate(t, report, func(r R) {
				r.State, r.Solved = schemas.StateNoConsensus, false
				r.NoConsensus = &schemas.NoConsensus{Step: 731, Samples: 100, Tally: []schemas.TallyEntry{{VoteKey: "a", Votes: -1}}}
			})
		}, schemas.ErrInvalid, "tally[0].votes must be >= 0, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := tt.m(t)
			err := m.Validate()
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Validate = %v, want %v containing %q", err, tt.want, tt.msg)
			}
			// Encode refuses what Validate refuses.
			if _, encErr := schemas.Encode(m); encErr == nil || encErr.Error() != err.Error() {
				t.Errorf("Encode = %v, want %v", encErr, err)
			}
		})
	}
}

// No number on the wire is negative, except seeds: setting any top-level
// number of any kind to -1 fails Validate with an error naming the field.
func TestValidateNoNegativeNumbers(t *testing.T) {
	t.Parallel()
	for _, mt := range schemas.All() {
		typ := reflect.TypeOf(mt.New()).Elem()
		for i := range typ.NumField() {
			sf := typ.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			var set func(reflect.Value)
			switch ft.Kind() {
			case reflect.Int, reflect.Int64:
				set = func(v reflect.Value) { v.SetInt(-1) }
			case reflect.Float64:
				set = func(v reflect.Value) { v.SetFloat(-1) }
			default:
				continue
			}
			if name == "seed" {
				continue
			}
			t.Run(mt.Kind+"/"+name, func(t *testing.T) {
				t.Parallel()
				m := decodeGolden(t, mt.Kind)
				v := reflect.ValueOf(m).Elem().Field(i)
				if v.Kind() == reflect.Pointer {
					v.Set(reflect.New(ft))
					v = v.Elem()
				}
				set(v)
				err := m.Validate()
				named := regexp.MustCompile(`(^|[^a-z_])` + name + `([^a-z_]|$)`)
				if !errors.Is(err, schemas.ErrInvalid) || !named.MatchString(err.Error()) {
					t.Errorf("Validate = %v, want ErrInvalid naming %s", err, name)
				}
			})
		}
	}
}

// Seeds may be any int64.
func TestValidateNegativeSeed(t *testing.T) {
	t.Parallel()
	s := decodeGolden(t, schemas.KindJobSpec).(*schemas.JobSpec)
	s.Seed = math.MinInt64
	r := decodeGolden(t, schemas.KindSampleRequest).(*schemas.SampleRequest)
	r.Seed = -1
	for _, m := range []schemas.Message{s, r} {
		if err := m.Validate(); err != nil {
			t.Errorf("%s: %v", m.MessageKind(), err)
		}
	}
}

// Optional fields left at zero, as Decode leaves them when omitempty
// dropped them, are valid.
func TestValidateOptionalZero(t *testing.T) {
	t.Parallel()
	s := decodeGolden(t, schemas.KindJobSpec).(*schemas.JobSpec)
	s.TemperatureRest, s.PEstimate, s.ValidFraction, s.Pricing = nil, 0, 0, nil
	if err := s.Validate(); err != nil {
		t.Errorf("job spec: %v", err)
	}
	r := decodeGolden(t, schemas.KindJobReport).(*schemas.JobReport)
	r.Params, r.RedFlags, r.Reason, r.ErrorSteps = nil, nil, "", nil
	if err := r.Validate(); err != nil {
		t.Errorf("job report: %v", err)
	}
	d := decodeGolden(t, schemas.KindStepDecided).(*schemas.StepDecided)
	d.Tally = nil
	if err := d.Validate(); err != nil {
		t.Errorf("step decided: %v", err)
	}
	for _, outcome := range []string{schemas.OutcomeSkipped, schemas.OutcomeCancelled} {
		res := decodeGolden(t, schemas.KindSampleResult).(*schemas.SampleResult)
		res.Outcome, res.VoteKey, res.FinishReason, res.Model = outcome, "", "", ""
		if err := res.Validate(); err != nil {
			t.Errorf("%s result: %v", outcome, err)
		}
	}
	for _, reason := range []string{schemas.RedFlagLength, schemas.RedFlagTooLong, schemas.RedFlagParse, schemas.RedFlagEmpty} {
		res := decodeGolden(t, schemas.KindSampleResult).(*schemas.SampleResult)
		res.Outcome, res.VoteKey, res.RedFlag, res.Detail = schemas.OutcomeRedFlag, "", reason, "why"
		if err := res.Validate(); err != nil {
			t.Errorf("%s red flag: %v", reason, err)
		}
	}
}

func TestApplyDefaults(t *testing.T) {
	t.Parallel()
	var s schemas.JobSpec
	s.ApplyDefaults()
	want := schemas.JobSpec{
		Header:            schemas.NewHeader(schemas.KindJobSpec),
		Tenant:            schemas.DefaultTenant,
		MaxSamplesPerStep: schemas.DefaultMaxSamplesPerStep,
		MaxOutputTokens:   schemas.DefaultMaxOutputTokens,
		SampleTimeoutMS:   schemas.DefaultSampleTimeoutMS,
		ValidFraction:     1,
	}
	rest := schemas.DefaultTemperatureRest
	want.TemperatureRest = &rest
	if !reflect.DeepEqual(s, want) {
		t.Errorf("ApplyDefaults on zero:\n got %+v\nwant %+v", s, want)
	}
	if s.Rest() != schemas.DefaultTemperatureRest {
		t.Errorf("Rest = %v", s.Rest())
	}

	// Set fields are kept, including a header that is wrong (Validate's job)
	// and a rest temperature of 0.
	zero := 0.0
	set := schemas.JobSpec{
		Header: schemas.Header{Version: 2, Kind: schemas.KindJobSpec}, Tenant: "acme",
		MaxSamplesPerStep: 7, MaxOutputTokens: 9, TemperatureRest: &zero,
		SampleTimeoutMS: 11, ValidFraction: 0.5,
	}
	got := set
	got.ApplyDefaults()
	if !reflect.DeepEqual(got, set) || got.Rest() != 0 {
		t.Errorf("ApplyDefaults changed set fields:\n got %+v\nwant %+v", got, set)
	}

	// Required fields plus ApplyDefaults make a valid spec; a second call
	// changes nothing.
	min := schemas.JobSpec{JobID: "j1", Task: "hanoi", Params: json.RawMessage(`{"disks":3}`), K: 2}
	min.ApplyDefaults()
	if err := min.Validate(); err != nil {
		t.Errorf("defaulted spec: %v", err)
	}
	again := min
	again.ApplyDefaults()
	if !reflect.DeepEqual(again, min) {
		t.Error("ApplyDefaults is not idempotent")
	}
	if (&schemas.JobSpec{}).Rest() != schemas.DefaultTemperatureRest {
		t.Error("Rest without a value is not the default")
	}
}

func TestTerminal(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{
		schemas.StateQueued:      false,
		schemas.StateRunning:     false,
		schemas.StateSolved:      true,
		schemas.StateUnsolved:    true,
		schemas.StateNoConsensus: true,
		schemas.StateFailed:      true,
		"":                       false,
		"Solved":                 false,
		schemas.StateCancelled:   true,
		schemas.StatePaused:      false,
	}
	for state, want := range tests {
		if got := schemas.Terminal(state); got != want {
			t.Errorf("Terminal(%q) = %v, want %v", state, got, want)
		}
	}
}

func TestSampleID(t *testing.T) {
	t.Parallel()
	if got, want := schemas.SampleID("acme", "hanoi-10-k3", 731, 2, 5, 1), "acme/hanoi-10-k3/731/2/5/1"; got != want {
		t.Errorf("SampleID = %q, want %q", got, want)
	}
}

// Encode then Decode gives the message back, for every kind, and a second
// round gives the same bytes.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, mt := range schemas.All() {
		t.Run(mt.Kind, func(t *testing.T) {
			t.Parallel()
			m := decodeGolden(t, mt.Kind)
			b1, err := schemas.Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			back := mt.New()
			if err := schemas.Decode(b1, back); err != nil {
				t.Fatalf("Decode(Encode(m)): %v", err)
			}
			if !reflect.DeepEqual(normalized(t, back), normalized(t, m)) {
				t.Errorf("round trip changed the message:\n got %+v\nwant %+v", back, m)
			}
			b2, err := schemas.Encode(back)
			if err != nil {
				t.Fatal(err)
			}
			if string(b1) != string(b2) {
				t.Errorf("second Encode differs:\n%s\n%s", b1, b2)
			}
		})
	}
}

// bigParams opens an object with keys k0..k199, past keySet's list.
var bigParams = func() string {
	var b strings.Builder
	b.WriteString(`{"disks": 10`)
	for i := range 200 {
		fmt.Fprintf(&b, `, "k%d": %d`, i, i)
	}
	return b.String()
}()

// Decode reads keys as the JSON Schema does: case-sensitively and once,
// at every depth, while leaving what raw params mean to the task.
func TestDecodeKeys(t *testing.T) {
	t.Parallel()
	spec := string(golden(t, schemas.KindJobSpec))
	report := string(golden(t, schemas.KindJobReport))
	decided := string(golden(t, schemas.KindStepDecided))
	tests := []struct {
		name, kind, data, msg string
	}{
		{"header case", schemas.KindJobSpec, strings.Replace(spec, `"kind"`, `"Kind"`, 1), `unknown field "Kind"`},
		{"kelvin sign k", schemas.KindJobSpec, strings.Replace(spec, `"k":`, `"\u212a":`, 1), "unknown field \"\u212a\""},
		{"nested case", schemas.KindJobSpec, strings.Replace(spec, `"input_usd_per_mtok"`, `"Input_USD_per_MTok"`, 1), `unknown field "Input_USD_per_MTok"`},
		{"nested in slice", schemas.KindStepDecided, strings.Replace(decided, `"votes": 1}`, `"Votes": 1}`, 1), `unknown field "Votes"`},
		{"duplicate header", schemas.KindJobSpec, strings.Replace(spec, `"version": 1,`, `"version": 1, "version": 1,`, 1), `duplicate key "version"`},
		{"duplicate in params", schemas.KindJobSpec, strings.Replace(spec, `{"disks": 10}`, `{"disks": 3, "disks": 10}`, 1), `duplicate key "disks"`},
		{"duplicate map key", schemas.KindJobReport, strings.Replace(report, `"parse": 16`, `"parse": 16, "parse": 16`, 1), `duplicate key "parse"`},
		{"duplicate escaped", schemas.KindJobSpec, strings.Replace(spec, `"seed":`, `"se\u0065d": 1, "seed":`, 1), `duplicate key "seed"`},
		{"duplicate in big params", schemas.KindJobSpec, strings.Replace(spec, `{"disks": 10}`, bigParams+`, "k7": 0}`, 1), `duplicate key "k7"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := schemas.Decode([]byte(tt.data), newMessage(t, tt.kind))
			if !errors.Is(err, schemas.ErrInvalid) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Decode = %v, want ErrInvalid containing %q", err, tt.msg)
			}
		})
	}

	// Raw params may use any keys and numbers; only the task reads them.
	big := strings.Replace(spec, `{"disks": 10}`, bigParams+`}`, 1)
	if err := schemas.Decode([]byte(big), new(schemas.JobSpec)); err != nil {
		t.Errorf("Decode with 200 params: %v", err)
	}
	ok := strings.Replace(spec, `{"disks": 10}`, `{"disks": 10, "Disks": [1e400, {"x": null}]}`, 1)
	if err := schemas.Decode([]byte(ok), new(schemas.JobSpec)); err != nil {
		t.Errorf("Decode with free-form params: %v", err)
	}
}

// TestSampleRequestAlso: a request asking several samples names each by
// a distinct index and its own token, never at temperature 0 (n copies
// of one greedy answer are not votes), at most MaxSamplesPerCall in all;
// Members gives each its sample id.
func TestSampleRequestAlso(t *testing.T) {
	t.Parallel()
	var base schemas.SampleRequest
	if err := schemas.Decode(golden(t, schemas.KindSampleRequest), &base); err != nil {
		t.Fatal(err)
	}
	base.Temperature = 0.1
	tok := strings.Repeat("A", schemas.SampleTokenLen)
	ok := base
	ok.Also = []schemas.SampleMember{{Index: base.Index + 1, Seed: 9, Token: tok}, {Index: base.Index + 2, Seed: 10, Token: tok}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a good group: %v", err)
	}
	ms := ok.Members()
	if len(ms) != 3 || ms[2].Index != base.Index+2 || ms[2].Seed != 10 || ms[2].Also != nil ||
		ms[2].SampleID != schemas.BranchSampleID(base.Tenant, base.JobID, base.Step, base.Epoch, base.Index+2, base.Attempt, base.Branch) {
		t.Errorf("members: %+v", ms)
	}
	if err := ms[2].Validate(); err != nil {
		t.Errorf("a member does not validate: %v", err)
	}
	// A wave in one request: its first sample greedy, the others at the
	// job's rest temperature, each drawn at its own.
	wave := base
	wave.Temperature = 0
	wave.Also = []schemas.SampleMember{{Index: base.Index + 1, Seed: 9, Token: tok, Temperature: 0.1}, {Index: base.Index + 2, Seed: 10, Token: tok, Temperature: 0.1}}
	if err := wave.Validate(); err != nil {
		t.Fatalf("a wave: %v", err)
	}
	if ms := wave.Members(); ms[0].Temperature != 0 || ms[1].Temperature != 0.1 || ms[2].Temperature != 0.1 {
		t.Errorf("a wave's members' temperatures: %v %v %v", ms[0].Temperature, ms[1].Temperature, ms[2].Temperature)
	}
	for _, tc := range []struct {
		name string
		edit func(r *schemas.SampleRequest)
	}{
		{"greedy", func(r *schemas.SampleRequest) { r.Temperature = 0 }},
		{"a greedy member", func(r *schemas.SampleRequest) { r.Temperature = 0; r.Also[1].Temperature = 0.1 }},
		{"a member's negative temperature", func(r *schemas.SampleRequest) { r.Also[0].Temperature = -1 }},
		{"a member too hot", func(r *schemas.SampleRequest) { r.Also[0].Temperature = schemas.MaxTemperature + 0.5 }},
		{"its own index", func(r *schemas.SampleRequest) { r.Also[0].Index = r.Index }},
		{"twice", func(r *schemas.SampleRequest) { r.Also[1].Index = r.Also[0].Index }},
		{"negative", func(r *schemas.SampleRequest) { r.Also[0].Index = -1 }},
		{"bad token", func(r *schemas.SampleRequest) { r.Also[0].Token = "short" }},
		{"too many", func(r *schemas.SampleRequest) {
			for i := range schemas.MaxSamplesPerCall {
				r.Also = append(r.Also, schemas.SampleMember{Index: 100 + i, Token: tok})
			}
		}},
	} {
		r := ok
		r.Also = append([]schemas.SampleMember(nil), ok.Also...)
		tc.edit(&r)
		if err := r.Validate(); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestSampleResultAlso: a result holding a wave's answers names each by a
// distinct index with its own outcome and token, never an unserved
// notice, at most MaxSamplesPerCall in all, each checked as a result of
// its own; AppendParts and Member go back and forth.
func TestSampleResultAlso(t *testing.T) {
	t.Parallel()
	var base schemas.SampleResult
	if err := schemas.Decode(golden(t, schemas.KindSampleResult), &base); err != nil {
		t.Fatal(err)
	}
	tok := strings.Repeat("A", schemas.SampleTokenLen)
	ok := base
	ok.Also = []schemas.ResultMember{
		{Index: base.Index + 1, Outcome: schemas.OutcomeVote, VoteKey: "k", CompletionTokens: 5, LatencyMS: 1, Token: tok},
		{Index: base.Index + 2, Outcome: schemas.OutcomeRedFlag, RedFlag: schemas.RedFlagParse, Detail: "no move", Token: tok},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a good batch: %v", err)
	}
	parts := ok.AppendParts(nil)
	if len(parts) != 3 || parts[0].Also != nil || parts[0].Index != base.Index || parts[2].RedFlag != schemas.RedFlagParse ||
		parts[2].SampleID != schemas.BranchSampleID(base.Tenant, base.JobID, base.Step, base.Epoch, base.Index+2, base.Attempt, base.Branch) ||
		parts[1].VoterID != base.VoterID || parts[1].Model != base.Model || parts[1].Token != tok {
		t.Errorf("parts: %+v", parts)
	}
	for i, p := range parts {
		if err := p.Validate(); err != nil {
			t.Errorf("part %d does not validate: %v", i, err)
		}
		if i > 0 && p.Member() != ok.Also[i-1] {
			t.Errorf("part %d as a member: %+v, want %+v", i, p.Member(), ok.Also[i-1])
		}
	}
	for _, tc := range []struct {
		name string
		edit func(r *schemas.SampleResult)
	}{
		{"its own index", func(r *schemas.SampleResult) { r.Also[0].Index = r.Index }},
		{"twice", func(r *schemas.SampleResult) { r.Also[1].Index = r.Also[0].Index }},
		{"negative", func(r *schemas.SampleResult) { r.Also[0].Index = -1 }},
		{"bad token", func(r *schemas.SampleResult) { r.Also[0].Token = "short" }},
		{"a vote without its key", func(r *schemas.SampleResult) { r.Also[0].VoteKey = "" }},
		{"a red flag with a key", func(r *schemas.SampleResult) { r.Also[1].VoteKey = "k" }},
		{"an unknown outcome", func(r *schemas.SampleResult) { r.Also[0].Outcome = "maybe" }},
		{"an unserved member", func(r *schemas.SampleResult) { r.Also[0].Outcome, r.Also[0].VoteKey = schemas.OutcomeUnserved, "" }},
		{"an unserved notice with members", func(r *schemas.SampleResult) {
			r.Outcome, r.VoteKey, r.FinishReason = schemas.OutcomeUnserved, "", ""
		}},
		{"negative tokens", func(r *schemas.SampleResult) { r.Also[0].PromptTokens = -1 }},
		{"cached over prompt", func(r *schemas.SampleResult) { r.Also[0].CachedPromptTokens = 1 }},
		{"a long detail", func(r *schemas.SampleResult) { r.Also[1].Detail = strings.Repeat("x", schemas.MaxResultDetail+1) }},
		{"too many", func(r *schemas.SampleResult) {
			for i := range schemas.MaxSamplesPerCall {
				r.Also = append(r.Also, schemas.ResultMember{Index: 100 + i, Outcome: schemas.OutcomeSkipped, Token: tok})
			}
		}},
	} {
		r := ok
		r.Also = append([]schemas.ResultMember(nil), ok.Also...)
		tc.edit(&r)
		if err := r.Validate(); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
