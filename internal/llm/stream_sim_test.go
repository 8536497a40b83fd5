package llm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/task/hanoi"
)

// A streaming client against the simulated model gets what a plain one
// gets: the same choices, finish reasons (an overlong reply: "length",
// the voter's red flag) and usage; a 429 is retried; an unknown model is a
// permanent 404.
func TestStreamAgainstSimulatedModel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rn, err := simllm.Start(ctx, "127.0.0.1:0", simllm.Config{Accuracy: 0.7, OverlongRate: 0.3, MalformedRate: 0.1, Seed: 5,
		Models: []string{simllm.DefaultModel}, RetryAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rn.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	client := func(stream bool) *llm.Client {
		c, err := llm.New(llm.Config{BaseURL: rn.URL(), Model: simllm.DefaultModel, Stream: stream, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	plain, streamed := client(false), client(true)

	in, err := hanoi.New(4)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := in.Prompt(in.Initial())
	if err != nil {
		t.Fatal(err)
	}
	req := llm.Request{Temperature: 0.4, N: 8, MaxTokens: 200}
	for _, m := range msgs {
		req.Messages = append(req.Messages, llm.Message{Role: m.Role, Content: m.Content})
	}
	lengths := 0
	for seed := range int64(6) {
		req.Seed = &seed
		want, err := plain.Complete(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := streamed.Complete(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Choices) != len(want.Choices) || got.PromptTokens != want.PromptTokens || got.CompletionTokens != want.CompletionTokens || got.Model != want.Model {
			t.Fatalf("seed %d: streamed %+v, want %+v", seed, got, want)
		}
		for i := range want.Choices {
			if got.Choices[i] != want.Choices[i] {
				t.Errorf("seed %d choice %d: streamed %+v, want %+v", seed, i, got.Choices[i], want.Choices[i])
			}
			if got.Choices[i].FinishReason == "length" {
				lengths++
			}
		}
	}
	if lengths == 0 {
		t.Error("no overlong reply streamed with finish_reason length")
	}

	// A forced 429 (twice) is retried.
	req.Headers = map[string]string{"X-Sim-Fault": "rate_limit; times=2"}
	res, err := streamed.Complete(ctx, req)
	if err != nil || res.Attempts != 3 {
		t.Errorf("after two 429s: attempts %d, %v", res.Attempts, err)
	}
	req.Headers = nil

	// An unknown model: permanent, 404.
	req.Model = "gpt-9"
	_, err = streamed.Complete(ctx, req)
	if !errors.Is(err, llm.ErrPermanent) || llm.HTTPStatus(err) != 404 {
		t.Errorf("unknown model: %v (status %d)", err, llm.HTTPStatus(err))
	}
}
