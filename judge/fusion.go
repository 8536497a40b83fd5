package judge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/makerfleet/makerfleet/judge/guard"
	"github.com/makerfleet/makerfleet/schemas"
)

// The OpenRouter fusion shape: a chat-completions request whose plugins
// name a panel (analysis_models) and a judge (model). The judge accepts it
// two ways: FromFusion turns such a request into a break-glass request
// (the panel and judge it names replace the configured ones), and
// pass-through mode (Settings.Passthrough) sends every request in this
// shape to a fusion-capable endpoint instead of fanning out here.

// FusionRequest is the fusion request shape.
type FusionRequest struct {
	Model    string                 `json:"model"`
	Plugins  []schemas.FusionPlugin `json:"plugins"`
	Messages []FusionMessage        `json:"messages"`
	// MaxTokens caps the synthesis.
	MaxTokens int `json:"max_tokens,omitempty"`
}

// FusionMessage is one chat message of a fusion request.
type FusionMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// FromFusion fills req from a fusion-shaped request body: the last user
// message is the problem (it must carry the "break glass:" trigger like any
// other), system messages become constraints, and the fusion plugin names
// the panel and judge. req's other fields (ids, prior attempts) are kept.
func FromFusion(body []byte, req *schemas.BreakGlassRequest) error {
	var fr FusionRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fr); err != nil {
		return fmt.Errorf("judge: fusion request: %w", err)
	}
	var system []string
	problem := ""
	for _, m := range fr.Messages {
		switch m.Role {
		case "system", "developer":
			system = append(system, m.Content)
		case "user":
			problem = m.Content
		}
	}
	if strings.TrimSpace(problem) == "" {
		return fmt.Errorf("judge: fusion request has no user message")
	}
	if len(fr.Plugins) != 1 || fr.Plugins[0].ID != "fusion" {
		return fmt.Errorf("judge: fusion request needs exactly one plugin with id \"fusion\"")
	}
	req.Problem = problem
	req.Plugins = fr.Plugins
	if len(system) > 0 {
		req.Constraints = strings.TrimSpace(strings.Join(append([]string{req.Constraints}, system...), "\n\n"))
	}
	return nil
}

// fusionResult is a pass-through call's outcome.
type fusionResult struct {
	text                     string
	promptTokens, completion int64
	costUSD                  float64 // the endpoint's own figure, if it sent one
}

// passthrough sends one fusion request to the configured endpoint: the
// judge's system prompt, the assembled context, the panel and the judge.
func (sv *Service) passthrough(ctx context.Context, pt *Passthrough, a Assembled, panel []string, judgeModel string) (fusionResult, error) {
	ep := sv.eps.passthrough(pt)
	body, err := json.Marshal(FusionRequest{
		Model:   pt.Model,
		Plugins: []schemas.FusionPlugin{{ID: "fusion", Model: judgeModel, AnalysisModels: panel}},
		Messages: []FusionMessage{
			{Role: "system", Content: judgeSystemPrompt(a.Nonce)},
			{Role: "user", Content: a.User},
		},
		MaxTokens: sv.s.JudgeMaxTokens,
	})
	if err != nil {
		return fusionResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, sv.s.MemberTimeout+sv.s.JudgeTimeout)
	defer cancel()
	var lastErr error
	for attempt := 1; attempt <= sv.s.MaxAttempts; attempt++ {
		res, retry, err := postFusion(ctx, ep, body)
		if err == nil {
			return res, nil
		}
		lastErr = err
		if !retry || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 250 * time.Millisecond):
		}
	}
	return fusionResult{}, fmt.Errorf("judge: pass-through to %s: %w", ep.BaseURL, lastErr)
}

func postFusion(ctx context.Context, ep Endpoint, body []byte) (res fusionResult, retry bool, err error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(ep.BaseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return res, false, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if ep.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+ep.APIKey)
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return res, true, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return res, true, err
	}
	if resp.StatusCode != http.StatusOK {
		retry = resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
		return res, retry, fmt.Errorf("http status %d: %s", resp.StatusCode, guard.Redact(strings.TrimSpace(string(data[:min(len(data), 300)]))))
	}
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64    `json:"prompt_tokens"`
			CompletionTokens int64    `json:"completion_tokens"`
			Cost             *float64 `json:"cost"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Choices) == 0 {
		return res, false, fmt.Errorf("unreadable response (%v)", err)
	}
	res = fusionResult{text: out.Choices[0].Message.Content, promptTokens: out.Usage.PromptTokens, completion: out.Usage.CompletionTokens, costUSD: -1}
	if out.Usage.Cost != nil {
		res.costUSD = *out.Usage.Cost
	}
	return res, false, nil
}
