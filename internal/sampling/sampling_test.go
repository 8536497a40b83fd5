package sampling_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/sampling"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/task/spec"
)

func TestRequest(t *testing.T) {
	t.Parallel()
	prompt := []task.Message{{Role: "system", Content: "rules"}, {Role: "user", Content: "state"}}
	req := sampling.Request(prompt, 0, 750, -7, "m2")
	if req.Temperature != 0 || req.MaxTokens != 750 || req.Seed == nil || *req.Seed != -7 || req.N != 1 || req.Model != "m2" {
		t.Errorf("request %+v", req)
	}
	if len(req.Messages) != 2 || req.Messages[1] != (llm.Message{Role: "user", Content: "state"}) {
		t.Errorf("messages %+v", req.Messages)
	}
	prompt[1].Content = "changed"
	if req.Messages[1].Content != "state" {
		t.Error("the request shares the prompt's messages")
	}
}

// TestJudge: the red flags in order and a vote's canonical key (the
// voter's own tests cover every case through voter.Judge); a task spec's
// red flag keeps its name, usage out of range is "empty" with no usage.
func TestJudge(t *testing.T) {
	t.Parallel()
	in, err := hanoi.New(3)
	if err != nil {
		t.Fatal(err)
	}
	s := in.Initial()
	reply := func(content, finish string, out int) llm.Response {
		return llm.Response{Choices: []llm.Choice{{Content: content, FinishReason: finish}}, PromptTokens: 100, CompletionTokens: out}
	}
	const good = "move = [1, 0, 2]\nnext_state = [[3, 2], [], [1]]"
	for _, tc := range []struct {
		name    string
		resp    llm.Response
		outcome string
		flag    string
	}{
		{"vote", reply(good, "stop", 20), schemas.OutcomeVote, ""},
		{"length", reply(good, "length", 20), schemas.OutcomeRedFlag, schemas.RedFlagLength},
		{"too long", reply(good, "stop", 751), schemas.OutcomeRedFlag, schemas.RedFlagTooLong},
		{"parse", reply("move = [1]", "stop", 3), schemas.OutcomeRedFlag, schemas.RedFlagParse},
		{"no content", reply("", "stop", 0), schemas.OutcomeRedFlag, schemas.RedFlagEmpty},
		{"usage out of range", llm.Response{Choices: []llm.Choice{{Content: good}}, PromptTokens: -1, CompletionTokens: 5}, schemas.OutcomeRedFlag, schemas.RedFlagEmpty},
	} {
		res := sampling.Judge(in, s, 750, tc.resp)
		if res.Outcome != tc.outcome || res.RedFlag != tc.flag {
			t.Errorf("%s: %q %q (%s), want %q %q", tc.name, res.Outcome, res.RedFlag, res.Detail, tc.outcome, tc.flag)
		}
		if tc.name == "usage out of range" && (res.PromptTokens != 0 || res.CompletionTokens != 0) {
			t.Errorf("usage out of range kept: %d %d", res.PromptTokens, res.CompletionTokens)
		}
	}

	tk, err := spec.Compile([]byte(`name: counter
version: "1"
params: {type: object}
initial: '{"i": 0}'
max_steps: "3"
prompt: {user: 'Count.'}
answer:
  format: json
  schema: {type: object, properties: {i: {type: integer}}, required: [i]}
red_flags:
  - {name: skipped, when: answer.i != state.i + 1}
next: {field: i}
done: state == 3
`))
	if err != nil {
		t.Fatal(err)
	}
	si, err := tk.Bind(json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	res := sampling.Judge(si, si.Initial(), 750, reply(`{"i": 5}`, "stop", 5))
	if res.RedFlag != "skipped" || !strings.Contains(res.Detail, "answer.i") {
		t.Errorf("a spec's red flag: %q %q", res.RedFlag, res.Detail)
	}
}
