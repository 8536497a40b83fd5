package simllm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"

	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// The sim answers task/hanoi's own prompt; at temperature 0 with Accuracy 1
// the answer is the strategy's move.
func Example() {
	in, _ := hanoi.New(3)
	prompt, _ := in.Prompt(in.Initial())
	msgs := []map[string]string{}
	for _, m := range prompt {
		msgs = append(msgs, map[string]string{"role": m.Role, "content": m.Content})
	}
	body, _ := json.Marshal(map[string]any{"model": "sim-1", "temperature": 0, "messages": msgs})

	srv, _ := simllm.New(simllm.Config{Accuracy: 1})
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body)))

	var resp struct {
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
		}
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &resp)
	a, err := hanoi.ParseAnswer(resp.Choices[0].Message.Content, 3)
	fmt.Println(rec.Code, resp.Choices[0].FinishReason, a.Key(), err)
	// Output: 200 stop {"move":[1,0,2],"next_state":[[3,2],[],[1]]} <nil>
}
