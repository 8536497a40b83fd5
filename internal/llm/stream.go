package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// With Config.Stream a call asks for "stream": true with
// stream_options.include_usage and reads the server-sent chunks: each
// choice's content deltas are joined, its finish_reason kept, and the usage
// taken from the last chunk. A server that sends no usage (it ignores
// include_usage) gets estimated figures, marked Response.UsageEstimated
// and logged once per client: the prompt's bytes / 4 and the content's
// bytes / 4, so budgets and cost metrics keep moving.
// The whole stream is one attempt under AttemptTimeout, and what it
// assembles goes through the same checks as a plain reply (usable), so
// red flags and retries are those of a plain call:
//
//	stream outcome                                  treated as
//	an HTTP error before the stream                 that status (see retry.go)
//	the connection breaks, or an error event        a network error: retried
//	arrives mid-stream
//	a chunk that is not JSON, too many non-data     a 2xx reply that cannot be
//	lines, a choice without finish_reason at the    used (BadResponseAttempts)
//	end, a choice index beyond maxStreamChoices,
//	a body past maxReplyBytes (wire.go)

// maxStreamChoices bounds the choice indexes a stream may use, so a broken
// server cannot make the client allocate for index 1e9.
const maxStreamChoices = 128

// errStreamCut: the stream ended cleanly but a choice had no finish_reason.
var errStreamCut = errors.New("stream ended before every choice finished")

// createStream makes one streamed call and assembles the reply. st is the
// attempt's state: a stream that breaks after its 200 is marked as never
// answered, so it is retried like a network error.
func (c *Client) createStream(ctx context.Context, oreq openai.ChatCompletionRequest, st *attemptState) (openai.ChatCompletionResponse, bool, error) {
	oreq.Stream = true
	oreq.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	var out openai.ChatCompletionResponse
	stream, err := c.oa.CreateChatCompletionStream(ctx, oreq)
	if err != nil {
		return out, false, err
	}
	defer stream.Close()
	var (
		texts    []strings.Builder
		gotUsage bool
	)
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if !badStream(err) {
				st.status = 0 // a broken stream, not a bad reply
				err = fmt.Errorf("stream broke: %w", err)
			}
			return out, false, err
		}
		if out.ID == "" {
			out.ID, out.Object, out.Created, out.Model = chunk.ID, "chat.completion", chunk.Created, chunk.Model
		}
		if chunk.Usage != nil {
			out.Usage, gotUsage = *chunk.Usage, true
		}
		for _, ch := range chunk.Choices {
			if ch.Index < 0 || ch.Index >= maxStreamChoices {
				return out, false, fmt.Errorf("stream chunk with choice index %d outside [0, %d)", ch.Index, maxStreamChoices)
			}
			for len(out.Choices) <= ch.Index {
				out.Choices = append(out.Choices, openai.ChatCompletionChoice{Index: len(out.Choices)})
				texts = append(texts, strings.Builder{})
			}
			texts[ch.Index].WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				out.Choices[ch.Index].FinishReason = ch.FinishReason
			}
		}
	}
	for i := range out.Choices {
		out.Choices[i].Message = openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: texts[i].String()}
		if out.Choices[i].FinishReason == "" {
			return out, false, fmt.Errorf("%w: choice %d", errStreamCut, i)
		}
	}
	if gotUsage || len(out.Choices) == 0 {
		return out, false, nil
	}
	completion := 0
	for i := range texts {
		completion += texts[i].Len()
	}
	prompt := 0
	for _, m := range oreq.Messages {
		prompt += len(m.Content)
	}
	out.Usage.PromptTokens, out.Usage.CompletionTokens = estimateTokens(prompt), estimateTokens(completion)
	out.Usage.TotalTokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	return out, true, nil
}

// estimateTokens is a rough token count of n bytes of text: 4 bytes a
// token, rounded up.
func estimateTokens(n int) int { return (n + 3) / 4 }

// noUsage logs, once per client, that the server streams no usage.
func (c *Client) noUsage() {
	c.noUsageOnce.Do(func() {
		slog.Warn("llm: the server sent no usage in a streamed reply (stream_options.include_usage ignored?): "+
			"tokens are estimated (bytes / 4), and counted in maker_model_errors_total{code=\"no_usage\"}",
			"base_url", c.cfg.BaseURL, "model", c.cfg.Model)
	})
}

// badStream reports whether a mid-stream error means the server sent
// something unusable (not JSON, not a chunk, only comments) rather than
// the connection or the server failing.
func badStream(err error) bool {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	return errors.Is(err, openai.ErrTooManyEmptyStreamMessages) || errors.Is(err, errReplyTooLarge) ||
		errors.As(err, &syntax) || errors.As(err, &typ)
}
