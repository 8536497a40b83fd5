package simllm

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/makerfleet/makerfleet/task/hanoi"
)

// TestOfficialOpenAIGoClient drives the server over HTTP with the official
// Go client, github.com/openai/openai-go/v3: a completion, a stream with
// include_usage read through the client's ChatCompletionAccumulator (the
// same answer and usage), a stream cut at max_tokens, an unknown model (a
// 404 *openai.Error with code model_not_found, stream or not), a 429
// before a stream, and /v1/models.
func TestOfficialOpenAIGoClient(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const key = "sk-sim-go-check"
	rn, err := Start(ctx, "127.0.0.1:0", Config{Accuracy: 1, APIKey: key, Models: []string{"org/strong"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rn.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	client := openai.NewClient(option.WithBaseURL(rn.URL()+"/"), option.WithAPIKey(key), option.WithMaxRetries(0), option.WithHTTPClient(hc))

	in := mustInstance(t, 3)
	var msgs []openai.ChatCompletionMessageParamUnion
	for _, m := range messages(t, in, in.Initial()) {
		switch m["role"] {
		case "system":
			msgs = append(msgs, openai.SystemMessage(m["content"]))
		default:
			msgs = append(msgs, openai.UserMessage(m["content"]))
		}
	}
	const want = "move = [1, 0, 2]\nnext_state = [[3, 2], [], [1]]"
	params := openai.ChatCompletionNewParams{Model: "org/strong", Messages: msgs, Temperature: openai.Float(0), N: openai.Int(2), Seed: openai.Int(42)}

	// Not streamed.
	res, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if res.Object != "chat.completion" || res.Model != "org/strong" || len(res.Choices) != 2 || res.Usage.TotalTokens != res.Usage.PromptTokens+res.Usage.CompletionTokens {
		t.Fatalf("completion %+v", res)
	}
	for _, c := range res.Choices {
		if !strings.HasSuffix(c.Message.Content, want) || c.FinishReason != "stop" {
			t.Errorf("choice %d: %q %s", c.Index, c.Message.Content, c.FinishReason)
		}
	}

	// Streamed with include_usage, through the client's accumulator.
	sp := params
	sp.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, sp)
	var acc openai.ChatCompletionAccumulator
	chunks, usageChunks := 0, 0
	for stream.Next() {
		chunk := stream.Current()
		if !acc.AddChunk(chunk) {
			t.Fatalf("accumulator refused chunk %d: %s", chunks, chunk.RawJSON())
		}
		chunks++
		if chunk.Object != "chat.completion.chunk" {
			t.Errorf("chunk object %q", chunk.Object)
		}
		if len(chunk.Choices) == 0 {
			usageChunks++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if err := stream.Close(); err != nil {
		t.Fatal(err)
	}
	if usageChunks != 1 || chunks < 7 { // 2 × (role, ≥ 2 deltas, finish) + usage
		t.Errorf("%d chunks, %d with usage only", chunks, usageChunks)
	}
	au, ru := acc.Usage, res.Usage
	if len(acc.Choices) != 2 || au.PromptTokens != ru.PromptTokens || au.CompletionTokens != ru.CompletionTokens || au.TotalTokens != ru.TotalTokens || acc.Model != "org/strong" {
		t.Fatalf("accumulated %d choices, usage %+v (want %+v), model %q", len(acc.Choices), acc.Usage, res.Usage, acc.Model)
	}
	for i, c := range acc.Choices {
		if c.Message.Content != res.Choices[i].Message.Content || c.FinishReason != "stop" {
			t.Errorf("streamed choice %d: %q %q, want %q", i, c.Message.Content, c.FinishReason, res.Choices[i].Message.Content)
		}
	}

	// A stream cut at max_tokens ends with finish_reason length.
	cut := params
	cut.N, cut.MaxTokens = openai.Int(1), openai.Int(3)
	stream = client.Chat.Completions.NewStreaming(ctx, cut)
	acc = openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil || len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "length" || len(acc.Choices[0].Message.Content) != 12 {
		t.Errorf("cut stream: %v %+v", err, acc.Choices)
	}
	_ = stream.Close()

	// An unknown model: 404, as OpenAI answers, streamed or not.
	unknown := params
	unknown.Model = "gpt-9"
	_, err = client.Chat.Completions.New(ctx, unknown)
	checkAPIError(t, "unknown model", err, 404, "model_not_found", "The model `gpt-9` does not exist or you do not have access to it.")
	stream = client.Chat.Completions.NewStreaming(ctx, unknown)
	for stream.Next() {
		t.Error("a chunk for an unknown model")
	}
	checkAPIError(t, "unknown model, streamed", stream.Err(), 404, "model_not_found", "")
	_ = stream.Close()

	// A 429 comes before the stream, as a plain HTTP error.
	stream = client.Chat.Completions.NewStreaming(ctx, sp, option.WithHeader("X-Sim-Fault", "rate_limit"))
	for stream.Next() {
		t.Error("a chunk despite the 429")
	}
	checkAPIError(t, "429", stream.Err(), 429, "rate_limit_exceeded", "")
	_ = stream.Close()

	// Models.
	page, err := client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "sim-1,org/strong" {
		t.Errorf("models %v", ids)
	}
	_, err = client.Models.Get(ctx, "gpt-9")
	checkAPIError(t, "retrieve unknown", err, 404, "model_not_found", "")

	if _, err := hanoi.ParseAnswer(want, 3); err != nil {
		t.Fatal(err)
	}
	if st := rn.Stats(); st.UnknownModels != 2 || st.RateLimited != 1 || st.Completions != 3 {
		t.Errorf("stats %+v", st)
	}
}

func checkAPIError(t *testing.T, what string, err error, status int, code, message string) {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Errorf("%s: error %v (%T), want *openai.Error", what, err, err)
		return
	}
	if ae.StatusCode != status || ae.Code != code || (message != "" && ae.Message != message) {
		t.Errorf("%s: status %d code %q message %q type %q", what, ae.StatusCode, ae.Code, ae.Message, ae.Type)
	}
}
