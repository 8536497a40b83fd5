package llm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Message is one chat message. Role is "system", "user", "assistant", ...
type Message struct{ Role, Content string }

// Request is one chat-completions call.
type Request struct {
	Messages []Message
	// Temperature is always sent, exactly, including 0 (MAKER's first vote
	// of a step). Must be finite and >= 0.
	Temperature float64
	// MaxTokens is sent as max_tokens when > 0.
	MaxTokens int
	// Seed is sent as seed when non-nil.
	Seed *int64
	// N is the number of choices; default 1. Some servers ignore n > 1 and
	// return one choice: check len(Response.Choices).
	N int
	// Model overrides the client's model for this call ("" keeps it): an
	// escalated step asks a stronger model on the same server.
	Model string
	// Headers are sent with the request (the simulated model's hints:
	// SimHint).
	Headers map[string]string
}

// Choice is one returned completion.
type Choice struct {
	Content string
	// FinishReason as the server sent it: "stop", "length" (cut at the
	// token limit: a MAKER red flag), "content_filter", ...
	FinishReason string
}

// Response is the result of Complete. On error only Attempts and Latency
// are set.
type Response struct {
	Choices          []Choice
	PromptTokens     int
	CompletionTokens int
	// CachedPromptTokens is the part of PromptTokens the provider served
	// from its prompt cache (usage.prompt_tokens_details.cached_tokens),
	// billed at its cached price; within [0, PromptTokens].
	CachedPromptTokens int
	Model              string        // model name the server reported
	Attempts           int           // HTTP attempts made
	Latency            time.Duration // wall time including retries and waits
	// UsageEstimated: the server sent no usage (a stream whose server
	// ignores include_usage), so PromptTokens and CompletionTokens are
	// estimates (bytes / 4).
	UsageEstimated bool
}

// Client calls one model on one OpenAI-compatible server. Safe for
// concurrent use.
type Client struct {
	cfg     Config
	oa      *openai.Client
	hc      *http.Client
	ownHTTP bool
	// noUsageOnce: the missing usage of a stream is logged once.
	noUsageOnce sync.Once
}

// New validates cfg, applies defaults and returns a Client.
func New(cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	hc, own := cfg.HTTPClient, false
	if hc == nil {
		hc, own = newHTTPClient(), true
	}
	oc := openai.DefaultConfig(cfg.APIKey)
	oc.BaseURL = cfg.BaseURL
	oc.HTTPClient = &doer{hc: hc, onResponse: cfg.OnResponse}
	return &Client{cfg: cfg, oa: openai.NewClientWithConfig(oc), hc: hc, ownHTTP: own}, nil
}

// Close releases the idle connections of the default HTTP client (a
// caller-supplied one is left alone). Calls in flight are not interrupted.
func (c *Client) Close() {
	if c.ownHTTP {
		c.hc.CloseIdleConnections()
	}
}

// Complete sends req, retrying transient failures (see errors.go for how
// each failure is reported), as one request or, with Config.Stream, as a
// stream whose chunks it joins (stream.go). A Response it returns without error has at
// least one choice and usage figures in [0, MaxUsageTokens].
func (c *Client) Complete(ctx context.Context, req Request) (Response, error) {
	start := time.Now()
	oreq, err := c.chatRequest(req)
	if err != nil {
		return Response{}, fmt.Errorf("%w: complete (model %s): %w", ErrPermanent, c.cfg.Model, err)
	}
	var (
		out       openai.ChatCompletionResponse
		estimated bool
	)
	attempts, err := c.retry(ctx, "complete", c.cfg.MaxAttempts, func(actx context.Context, st *attemptState) error {
		st.setTemperature, st.temperature, st.headers = true, req.Temperature, req.Headers
		st.maxBytes = maxReplyBytes(req.MaxTokens, oreq.N)
		var err error
		if c.cfg.Stream {
			out, estimated, err = c.createStream(actx, oreq, st)
		} else {
			out, err = c.oa.CreateChatCompletion(actx, oreq)
		}
		if err == nil {
			err = usable(&out)
		}
		return err
	})
	res := Response{Attempts: attempts, Latency: time.Since(start)}
	if err != nil {
		return res, err
	}
	res.Choices = make([]Choice, len(out.Choices))
	for i, ch := range out.Choices {
		res.Choices[i] = Choice{Content: ch.Message.Content, FinishReason: string(ch.FinishReason)}
	}
	res.PromptTokens = out.Usage.PromptTokens
	res.CompletionTokens = out.Usage.CompletionTokens
	if d := out.Usage.PromptTokensDetails; d != nil {
		// A figure out of range is the server's mistake: what it says it
		// cached cannot be more than the prompt, nor below nothing.
		res.CachedPromptTokens = min(max(d.CachedTokens, 0), res.PromptTokens)
	}
	res.Model = out.Model
	if estimated {
		res.UsageEstimated = true
		c.noUsage()
	}
	return res, nil
}

// Models lists the server's model IDs (GET /models), for health checks. It
// makes a single attempt: a retryable failure returns ErrRetryBudget.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	var list openai.ModelsList
	_, err := c.retry(ctx, "models", 1, func(actx context.Context, _ *attemptState) error {
		var err error
		list, err = c.oa.ListModels(actx)
		return err
	})
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(list.Models))
	for i, m := range list.Models {
		ids[i] = m.ID
	}
	return ids, nil
}

// ErrModelNotListed: the server answered GET /models, but its list does
// not hold the client's model. Some servers list nothing, or list a model
// under another name than they accept, so it is a warning, not a failure.
var ErrModelNotListed = errors.New("llm: model not listed by the server")

// maxListedModels bounds the model ids an ErrModelNotListed error names.
const maxListedModels = 10

// Check asks the server for its models (Models: one attempt, within ctx
// and the attempt timeout), so a voter finds an unreachable or refusing
// server when it starts, not at its first sample. It returns the call's
// error when the server does not answer with a list, ErrModelNotListed
// (naming what it lists) when the list lacks the client's model, else nil.
func (c *Client) Check(ctx context.Context) error {
	ids, err := c.Models(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(ids, c.cfg.Model) {
		return nil
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: %s lists no models, so %q cannot be checked", ErrModelNotListed, c.cfg.BaseURL, c.cfg.Model)
	}
	listed := strings.Join(ids[:min(len(ids), maxListedModels)], ", ")
	if len(ids) > maxListedModels {
		listed += fmt.Sprintf(", … (%d in all)", len(ids))
	}
	return fmt.Errorf("%w: %s lists %s; not %q", ErrModelNotListed, c.cfg.BaseURL, listed, c.cfg.Model)
}

// Probe asks the client's model for one token, to learn whether the
// provider serves it to this key when its /models list cannot tell (a
// model it does not list, or no list at all). It costs a few tokens. The
// error is Complete's: llm.ErrProvider when the key or the model is
// refused (401, 403, 404 model_not_found).
func (c *Client) Probe(ctx context.Context) error {
	_, err := c.Complete(ctx, Request{Messages: []Message{{Role: "user", Content: "Say OK."}}, MaxTokens: 1})
	return err
}

var errNoChoices = errors.New("response has no choices")

// usable checks what a 2xx reply says before anything of it is used: at
// least one choice, and usage figures a cost can be computed from (a
// negative count would lower a job's cost, an absurd one blow it up).
func usable(out *openai.ChatCompletionResponse) error {
	if len(out.Choices) == 0 {
		return errNoChoices
	}
	for _, u := range []struct {
		name string
		n    int
	}{{"prompt_tokens", out.Usage.PromptTokens}, {"completion_tokens", out.Usage.CompletionTokens}} {
		if u.n < 0 || u.n > MaxUsageTokens {
			return fmt.Errorf("response usage %s %d out of range [0, %d]", u.name, u.n, MaxUsageTokens)
		}
	}
	return nil
}

// chatRequest validates req and converts it. Temperature is deliberately
// left zero here (so go-openai omits it); the doer writes the exact value.
func (c *Client) chatRequest(req Request) (openai.ChatCompletionRequest, error) {
	if len(req.Messages) == 0 {
		return openai.ChatCompletionRequest{}, errors.New("no messages")
	}
	msgs := make([]openai.ChatCompletionMessage, len(req.Messages))
	for i, m := range req.Messages {
		if m.Role == "" {
			return openai.ChatCompletionRequest{}, fmt.Errorf("message %d has no role", i)
		}
		msgs[i] = openai.ChatCompletionMessage{Role: m.Role, Content: m.Content}
	}
	if math.IsNaN(req.Temperature) || math.IsInf(req.Temperature, 0) || req.Temperature < 0 {
		return openai.ChatCompletionRequest{}, fmt.Errorf("temperature %v: want a finite value >= 0", req.Temperature)
	}
	if req.MaxTokens < 0 {
		return openai.ChatCompletionRequest{}, fmt.Errorf("negative MaxTokens %d", req.MaxTokens)
	}
	if req.N < 0 {
		return openai.ChatCompletionRequest{}, fmt.Errorf("negative N %d", req.N)
	}
	var seed *int
	if req.Seed != nil {
		s := *req.Seed
		if s < math.MinInt || s > math.MaxInt { // only on 32-bit platforms
			return openai.ChatCompletionRequest{}, fmt.Errorf("seed %d does not fit in int", s)
		}
		v := int(s)
		seed = &v
	}
	model := c.cfg.Model
	if req.Model != "" {
		model = req.Model
	}
	return openai.ChatCompletionRequest{
		Model:    model,
		Messages: msgs,
		//lint:ignore SA1019 max_tokens is what llama.cpp, vLLM and older servers accept.
		MaxTokens: req.MaxTokens,
		N:         max(req.N, 1),
		Seed:      seed,
	}, nil
}
