package llm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/makerfleet/makerfleet/internal/llm"
)

func Example() {
	// A stand-in for llama.cpp, vLLM or the OpenAI API.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"model":"m","choices":[{"index":0,"message":{"role":"assistant",`+
			`"content":"move = [1, 0, 2]"},"finish_reason":"stop"}],"usage":{"prompt_tokens":600,"completion_tokens":9}}`)
	}))
	defer srv.Close()

	c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	// First vote of a MAKER step: temperature 0, sent as "temperature":0.
	res, err := c.Complete(context.Background(), llm.Request{
		Messages:    []llm.Message{{Role: "user", Content: "next move?"}},
		Temperature: 0,
		MaxTokens:   750,
	})
	var later *llm.RetryLaterError
	switch {
	case errors.As(err, &later):
		fmt.Println("reschedule in", later.Delay) // NakWithDelay
	case errors.Is(err, llm.ErrPermanent):
		fmt.Println("give up:", err) // Term
	case err != nil:
		fmt.Println("retry later:", err) // Nak
	default:
		fmt.Println(res.Choices[0].Content, res.Choices[0].FinishReason, res.PromptTokens+res.CompletionTokens, res.Attempts)
	}
	// Output: move = [1, 0, 2] stop 609 1
}
