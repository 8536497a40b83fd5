// Package sampling is one MAKER sample, shared by everything that draws
// one: the model request a step's prompt makes (Request) and the red flags
// that turn the model's response into a vote or throw it away (Judge). The
// voter answers sample requests with them; calibration (internal/calibrate)
// measures a model with them, so a measured sample is judged exactly as a
// voted one.
package sampling

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// Request is the model call for one sample of a step: the step's prompt,
// at temperature, with maxTokens as the reply limit sent to the model (the
// red-flag limit), seeded, one choice; model "" asks the client's own.
func Request(prompt []task.Message, temperature float64, maxTokens int, seed int64, model string) llm.Request {
	messages := make([]llm.Message, len(prompt))
	for i, m := range prompt {
		messages[i] = llm.Message{Role: m.Role, Content: m.Content}
	}
	return llm.Request{
		Messages: messages, Temperature: temperature, MaxTokens: maxTokens, Seed: &seed, N: 1, Model: model,
	}
}

// Judge turns a model response to the prompt for state into a sample
// result: the vote (its canonical key), or the red flag that throws it
// away, in this order: usage out of range or no content ("empty"), a reply
// cut at the token limit ("length"), more output tokens than
// maxOutputTokens ("too_long"), a reply the task's strict parser rejects
// ("parse", or a task spec's own red flag by its name). Usage, latency,
// model and finish reason are copied from resp.
func Judge(inst task.Instance, state task.State, maxOutputTokens int, resp llm.Response) schemas.SampleResult {
	res := schemas.SampleResult{
		PromptTokens: resp.PromptTokens, CompletionTokens: resp.CompletionTokens,
		CachedPromptTokens: min(max(resp.CachedPromptTokens, 0), max(resp.PromptTokens, 0)),
		LatencyMS:          float64(resp.Latency.Microseconds()) / 1000, Model: resp.Model,
	}
	if len(resp.Choices) > 0 {
		// Kept for empty replies too: "content_filter" says why there is none.
		res.FinishReason = resp.Choices[0].FinishReason
	}
	if resp.PromptTokens < 0 || resp.CompletionTokens < 0 || resp.PromptTokens > llm.MaxUsageTokens || resp.CompletionTokens > llm.MaxUsageTokens {
		// A model that does not check its usage (the llm client does):
		// no figure of it reaches a job's cost.
		res.PromptTokens, res.CompletionTokens, res.CachedPromptTokens = 0, 0, 0
		res.Outcome, res.RedFlag = schemas.OutcomeRedFlag, schemas.RedFlagEmpty
		res.Detail = fmt.Sprintf("usage out of range: %d prompt, %d completion tokens", resp.PromptTokens, resp.CompletionTokens)
		return res
	}
	if len(resp.Choices) == 0 || resp.Choices[0].Content == "" {
		res.Outcome, res.RedFlag, res.Detail = schemas.OutcomeRedFlag, schemas.RedFlagEmpty, "no content"
		return res
	}
	ch := resp.Choices[0]
	switch {
	case ch.FinishReason == "length":
		res.Outcome, res.RedFlag, res.Detail = schemas.OutcomeRedFlag, schemas.RedFlagLength, "reply cut at the token limit"
	case resp.CompletionTokens > maxOutputTokens:
		res.Outcome, res.RedFlag = schemas.OutcomeRedFlag, schemas.RedFlagTooLong
		res.Detail = fmt.Sprintf("%d output tokens, limit %d", resp.CompletionTokens, maxOutputTokens)
	default:
		vote, err := inst.Parse(state, ch.Content)
		var rf *task.RedFlag
		switch {
		case errors.As(err, &rf) && schemas.ValidRedFlagName(rf.Reason):
			// A task spec's own red flag, by its name.
			res.Outcome, res.RedFlag, res.Detail = schemas.OutcomeRedFlag, rf.Reason, truncate(rf.Detail, 200)
		case err != nil:
			// The reply's end goes with the error: where a model that
			// cannot answer says why (the simulated model does).
			res.Outcome, res.RedFlag, res.Detail = schemas.OutcomeRedFlag, schemas.RedFlagParse,
				truncate(err.Error(), 120)+"; the reply ends "+strconv.Quote(tail(ch.Content, 160))
		default:
			res.Outcome, res.VoteKey = schemas.OutcomeVote, vote.Key
		}
	}
	return res
}

// tail is the last n bytes of s (from a rune's start), marked as cut.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return "…" + s[i:]
}

// truncate cuts s to n bytes, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
