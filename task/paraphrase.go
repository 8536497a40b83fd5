package task

import "fmt"

// MaxParaphrase is the number of paraphrases Paraphrase knows: variants 1
// to MaxParaphrase (schemas.MaxPromptVariant is the same bound on the
// wire).
const MaxParaphrase = 8

// prefaces open a paraphrased prompt (a system message before the task's
// own); restatements close it (a user message after). They change how
// the question is put, never what it asks: the task's messages stay as
// they are, so its answer format and parser are unchanged.
var (
	prefaces = [MaxParaphrase]string{
		"Read the whole task below from the start before you answer. Treat it as a fresh problem.",
		"You are checking this step independently. Work it out yourself from the rules given below.",
		"Take this one slowly: re-read the rules and the current situation below before deciding.",
		"Another solver may have misread this step. Solve it carefully from the information below.",
		"Focus on the exact rules stated below and apply them literally to the situation given.",
		"Approach this step as if you had never seen the task before; rely only on what is written below.",
		"Double-check every detail of the situation described below before you commit to an answer.",
		"Work step by step through the rules below, then state your answer exactly as they ask.",
	}
	restatements = [MaxParaphrase]string{
		"To restate the request: apply the rules above to the situation above and give your answer in exactly the format asked for.",
		"In short: follow the stated rules for this one step and answer in the required format, nothing else changed.",
		"Once more: decide this single step by the rules above and write the answer in the format the task gives.",
		"Put differently: what does the rule above say to do here? Answer in exactly the format requested above.",
		"Before answering, check your answer against each rule above; then give it in the format asked for.",
		"Summary of the request: one step, decided by the rules above, answered in the format the task specifies.",
		"Repeat of the instruction: answer this step following the rules above, in precisely the requested format.",
		"Final reminder: the rules and format above are unchanged; answer this step accordingly.",
	}
)

// Paraphrase returns the messages of a step's prompt restated as variant
// v, from 1 to MaxParaphrase: a system message before them and a user
// message after them, fixed for each variant and the same for every
// task. A correlated step's decorrelated samples ask the paraphrase, so
// a model that errs on the wording of one prompt is asked another. msgs
// is not changed; variant 0 returns msgs itself.
func Paraphrase(msgs []Message, v int) ([]Message, error) {
	if v == 0 {
		return msgs, nil
	}
	if v < 0 || v > MaxParaphrase {
		return nil, fmt.Errorf("task: paraphrase variant %d: want 0 to %d", v, MaxParaphrase)
	}
	out := make([]Message, 0, len(msgs)+2)
	out = append(out, Message{Role: "system", Content: prefaces[v-1]})
	out = append(out, msgs...)
	return append(out, Message{Role: "user", Content: restatements[v-1]}), nil
}
