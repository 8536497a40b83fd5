package voter_test

import (
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task/hanoi"
	"github.com/makerfleet/makerfleet/voter"
)

// TestJudge: the red flags of the paper, in order (a reply cut at the
// token limit, a reply over the limit, a reply the strict parser rejects,
// no reply at all), and a good reply's canonical vote key.
func TestJudge(t *testing.T) {
	t.Parallel()
	inst, err := hanoi.New(3)
	if err != nil {
		t.Fatal(err)
	}
	req := &schemas.SampleRequest{State: inst.Initial(), MaxOutputTokens: 750}
	right := hanoi.Answer{Move: hanoi.Move{1, 0, 2}, NextState: hanoi.Pegs{{3, 2}, {}, {1}}}
	const good = "Disk 1 moves first.\nmove = [1, 0, 2]\nnext_state = [[3, 2], [], [1]]"
	reply := func(content, finish string, tokens int) llm.Response {
		return llm.Response{
			Choices:      []llm.Choice{{Content: content, FinishReason: finish}},
			PromptTokens: 600, CompletionTokens: tokens, Model: "m-1", Latency: 1500 * time.Microsecond,
		}
	}
	cases := []struct {
		name    string
		resp    llm.Response
		outcome string
		flag    string
		key     string
	}{
		{"good reply: canonical key", reply(good, "stop", 40), schemas.OutcomeVote, "", right.Key()},
		{"another spelling of the same answer: same key",
			reply("move=[1,0,2]\nnext_state=[[3,2],[],[1]]", "stop", 20), schemas.OutcomeVote, "", right.Key()},
		{"the last answer lines count",
			reply("move = [1, 0, 1]\nnext_state = [[3, 2], [1], []]\nNo, wait:\n"+good, "stop", 60), schemas.OutcomeVote, "", right.Key()},
		{"exactly at the token limit is fine", reply(good, "stop", 750), schemas.OutcomeVote, "", right.Key()},
		{"finish_reason length is a red flag even when the text parses", reply(good, "length", 750), schemas.OutcomeRedFlag, schemas.RedFlagLength, ""},
		{"length wins over too many tokens", reply(good, "length", 900), schemas.OutcomeRedFlag, schemas.RedFlagLength, ""},
		{"more output tokens than allowed", reply(good, "stop", 751), schemas.OutcomeRedFlag, schemas.RedFlagTooLong, ""},
		{"parse failure: prose only", reply("Move the small disk to the right.", "stop", 9), schemas.OutcomeRedFlag, schemas.RedFlagParse, ""},
		{"parse failure: a move of two numbers", reply("move = [1, 2]\nnext_state = [[3, 2], [], [1]]", "stop", 9), schemas.OutcomeRedFlag, schemas.RedFlagParse, ""},
		{"parse failure: a disk twice", reply("move = [1, 0, 2]\nnext_state = [[3, 2], [1], [1]]", "stop", 9), schemas.OutcomeRedFlag, schemas.RedFlagParse, ""},
		{"no choices", llm.Response{PromptTokens: 600}, schemas.OutcomeRedFlag, schemas.RedFlagEmpty, ""},
		{"empty content", reply("", "stop", 0), schemas.OutcomeRedFlag, schemas.RedFlagEmpty, ""},
		{"filtered: empty, and the finish reason says why", reply("", "content_filter", 0), schemas.OutcomeRedFlag, schemas.RedFlagEmpty, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := voter.Judge(inst, req, tc.resp)
			if res.Outcome != tc.outcome || res.RedFlag != tc.flag || res.VoteKey != tc.key {
				t.Fatalf("outcome %q red flag %q key %q (detail %q); want %q %q %q",
					res.Outcome, res.RedFlag, res.VoteKey, res.Detail, tc.outcome, tc.flag, tc.key)
			}
			if res.Outcome == schemas.OutcomeRedFlag && res.Detail == "" {
				t.Error("a red flag without detail")
			}
			if res.PromptTokens != tc.resp.PromptTokens || res.CompletionTokens != tc.resp.CompletionTokens {
				t.Errorf("tokens %d/%d, want the response's %d/%d (red-flagged samples cost too)",
					res.PromptTokens, res.CompletionTokens, tc.resp.PromptTokens, tc.resp.CompletionTokens)
			}
			if len(tc.resp.Choices) > 0 && (res.LatencyMS != 1.5 || res.Model != "m-1" || res.FinishReason != tc.resp.Choices[0].FinishReason) {
				t.Errorf("latency %v model %q finish %q, want 1.5 m-1 %q", res.LatencyMS, res.Model, res.FinishReason, tc.resp.Choices[0].FinishReason)
			}
		})
	}
}
