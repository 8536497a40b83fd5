package judge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
)

// synthesis is the judge model's answer: the response's structured part.
type synthesis struct {
	Diagnosis     string                `json:"diagnosis"`
	Solution      schemas.Solution      `json:"solution"`
	Alternatives  []string              `json:"alternatives"`
	Risks         []string              `json:"risks"`
	PanelAnalysis schemas.PanelAnalysis `json:"panel_analysis"`
}

// parseSynthesis reads and validates the judge's output: one JSON object
// (a Markdown code fence around it is tolerated) with a diagnosis, a
// solution with an approach and a confidence in [0, 1], and, for an
// arbitration (candidates given), a vote_key that is one of the
// candidates. Lists may be absent; unknown fields are ignored.
func parseSynthesis(text string, candidates []schemas.TallyEntry) (*synthesis, error) {
	body := strings.TrimSpace(text)
	if i, j := strings.IndexByte(body, '{'), strings.LastIndexByte(body, '}'); i >= 0 && j > i {
		body = body[i : j+1]
	} else {
		return nil, fmt.Errorf("%w: no JSON object in the output", ErrJudgeOutput)
	}
	var raw struct {
		synthesis
		Solution *struct {
			schemas.Solution
			Confidence *float64 `json:"confidence"`
		} `json:"solution"`
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrJudgeOutput, err)
	}
	out := raw.synthesis
	var problems []string
	if strings.TrimSpace(out.Diagnosis) == "" {
		problems = append(problems, "diagnosis is missing")
	}
	switch {
	case raw.Solution == nil:
		problems = append(problems, "solution is missing")
	default:
		out.Solution = raw.Solution.Solution
		if strings.TrimSpace(out.Solution.Approach) == "" {
			problems = append(problems, "solution.approach is missing")
		}
		if c := raw.Solution.Confidence; c == nil || math.IsNaN(*c) || *c < 0 || *c > 1 {
			problems = append(problems, "solution.confidence must be a number between 0 and 1")
		} else {
			out.Solution.Confidence = *c
		}
	}
	if candidates != nil {
		if !slices.ContainsFunc(candidates, func(e schemas.TallyEntry) bool { return e.VoteKey == out.Solution.VoteKey }) {
			problems = append(problems, "solution.vote_key must be one of the candidates, copied verbatim")
		}
	} else {
		out.Solution.VoteKey = ""
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrJudgeOutput, strings.Join(problems, "; "))
	}
	emptyLists(&out)
	return &out, nil
}

// emptyLists turns absent lists into empty ones, so the answer always
// shows every field.
func emptyLists(s *synthesis) {
	for _, l := range []*[]string{&s.Alternatives, &s.Risks, &s.Solution.FilesToChange, &s.PanelAnalysis.Consensus,
		&s.PanelAnalysis.Contradictions, &s.PanelAnalysis.PartialCoverage, &s.PanelAnalysis.UniqueInsights, &s.PanelAnalysis.BlindSpots} {
		if *l == nil {
			*l = []string{}
		}
	}
	if s.Solution.CodeSnippets == nil {
		s.Solution.CodeSnippets = map[string]string{}
	}
}

// judgeCall is one judge attempt's outcome.
type judgeRun struct {
	syn   *synthesis
	calls []schemas.MemberResult
	// reason is why syn is nil: the output stayed invalid, or the budget
	// could not cover a (re)try.
	reason string
}

// synthesize asks the judge model to synthesise the panel's answers,
// validating its output (against candidates, for an arbitration) and
// retrying once with the validation error; before each attempt it checks
// that spent plus the attempt's worst case stays within budget.
func (sv *Service) synthesize(ctx context.Context, judgeModel string, a Assembled, candidates []schemas.TallyEntry, answers []memberAnswer, spent, budget float64) judgeRun {
	msgs := []llm.Message{
		{Role: "system", Content: a.judgeSystem},
		{Role: "user", Content: a.judgeUser(answers)},
	}
	var run judgeRun
	for attempt := 1; attempt <= 2; attempt++ {
		var prompt int
		for _, msg := range msgs {
			prompt += EstimateTokens(msg.Content)
		}
		if worst := sv.s.CallCost(judgeModel, int64(prompt), int64(sv.s.JudgeMaxTokens)); spent+worst > budget {
			run.reason = joinReason(run.reason, fmt.Sprintf("the budget $%.2f does not cover judge attempt %d (worst case $%.2f after $%.2f spent)", budget, attempt, worst, spent))
			return run
		}
		jctx, cancel := context.WithTimeout(ctx, sv.s.JudgeTimeout)
		res, text := sv.panel.Call(jctx, RoleJudge, judgeModel, msgs, sv.s.JudgeMaxTokens)
		cancel()
		run.calls = append(run.calls, res)
		spent += res.CostUSD
		if !res.OK {
			run.reason = joinReason(run.reason, fmt.Sprintf("judge attempt %d failed: %s", attempt, res.Error))
			if errors.Is(ctx.Err(), context.Canceled) {
				return run
			}
			continue
		}
		syn, err := parseSynthesis(text, candidates)
		if err == nil {
			run.syn, run.reason = syn, ""
			return run
		}
		run.reason = joinReason(run.reason, fmt.Sprintf("judge attempt %d: %v", attempt, err))
		msgs = append(msgs,
			llm.Message{Role: "assistant", Content: text},
			llm.Message{Role: "user", Content: "That answer was not valid: " + err.Error() + ". Answer again with only the JSON object in the required shape."})
	}
	return run
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
