package judge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/judge/guard"
	"github.com/makerfleet/makerfleet/schemas"
)

// Completer calls one model. *llm.Client is the implementation; tests may
// supply another through Config.NewCompleter.
type Completer interface {
	Complete(ctx context.Context, req llm.Request) (llm.Response, error)
}

var _ Completer = (*llm.Client)(nil)

// Roles of a model call in MemberResult.Role.
const (
	RolePanel = "panel"
	RoleJudge = "judge"
)

// Endpoint is where a model lives: its base URL, key and wire name.
type Endpoint struct {
	BaseURL, APIKey, Model string
}

// models resolves model names to clients, one per model, created on first
// use and closed by close.
type models struct {
	s       *Settings
	baseURL string
	apiKey  string
	getenv  func(string) string
	newC    func(Endpoint, *Settings) (Completer, error)

	mu      sync.Mutex
	clients map[string]Completer
}

// endpoint resolves model name to its endpoint.
func (m *models) endpoint(name string) Endpoint {
	ms := m.s.Models[name]
	ep := Endpoint{BaseURL: ms.BaseURL, APIKey: m.apiKey, Model: ms.APIModel}
	if ep.BaseURL == "" {
		ep.BaseURL = m.baseURL
	}
	if ms.APIKeyEnv != "" {
		ep.APIKey = m.getenv(ms.APIKeyEnv)
	}
	if ep.Model == "" {
		ep.Model = name
	}
	return ep
}

// reachable checks that every configured panel member and the judge (or
// the pass-through endpoint) has a base URL.
func (m *models) reachable() error {
	if pt := m.s.Passthrough; pt != nil {
		if pt.BaseURL == "" && m.baseURL == "" {
			return fmt.Errorf("%w: the passthrough endpoint has no base_url and the judge has no default (--llm-base-url)", ErrConfig)
		}
		return nil
	}
	names := append([]string{m.s.JudgeModel, m.s.Arbitration.JudgeModel}, m.s.Arbitration.Panel...)
	for _, p := range m.s.Panels {
		names = append(names, p...)
	}
	for _, name := range names {
		if m.endpoint(name).BaseURL == "" {
			return fmt.Errorf("%w: model %s has no base_url and the judge has no default (--llm-base-url)", ErrConfig, name)
		}
	}
	return nil
}

func (m *models) client(name string) (Completer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clients[name]; ok {
		return c, nil
	}
	ep := m.endpoint(name)
	if ep.BaseURL == "" {
		return nil, fmt.Errorf("%w: model %s has no base_url and the judge has no default (--llm-base-url)", ErrConfig, name)
	}
	c, err := m.newC(ep, m.s)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	m.clients[name] = c
	return c, nil
}

func (m *models) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.clients {
		if cl, ok := c.(interface{ Close() }); ok {
			cl.Close()
		}
	}
	clear(m.clients)
}

// newLLMClient is the default Config.NewCompleter.
func newLLMClient(ep Endpoint, s *Settings) (Completer, error) {
	return llm.New(llm.Config{
		BaseURL:        ep.BaseURL,
		APIKey:         ep.APIKey,
		Model:          ep.Model,
		MaxAttempts:    s.MaxAttempts,
		AttemptTimeout: max(s.MemberTimeout, s.JudgeTimeout),
		BackoffBase:    200 * time.Millisecond,
		BackoffMax:     2 * time.Second,
		MaxRetryAfter:  5 * time.Second,
	})
}

// call makes one model call and reports it as a MemberResult; text is the
// reply. A call that fails is reported with OK false and its error, keys
// redacted.
func (m *models) call(ctx context.Context, role, model string, msgs []llm.Message, maxTokens int) (schemas.MemberResult, string) {
	start := time.Now()
	res := schemas.MemberResult{Model: model, Role: role}
	c, err := m.client(model)
	if err == nil {
		var resp llm.Response
		resp, err = c.Complete(ctx, llm.Request{Messages: msgs, Temperature: 0.2, MaxTokens: maxTokens})
		res.PromptTokens, res.CompletionTokens = int64(resp.PromptTokens), int64(resp.CompletionTokens)
		if err == nil {
			res.OK = true
			res.Response = resp.Choices[0].Content
		}
	}
	res.LatencyMS = time.Since(start).Milliseconds()
	res.CostUSD = m.s.CallCost(model, res.PromptTokens, res.CompletionTokens)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			err = fmt.Errorf("no answer before the panel deadline: %w", err)
		}
		res.Error = guard.Redact(err.Error())
	}
	return res, res.Response
}

// runPanel calls every member in parallel with the panel deadline
// (MemberTimeout) and returns their results in panel order. A member
// still running at the deadline is cancelled and reported failed.
func (m *models) runPanel(ctx context.Context, panel []string, a Assembled) []schemas.MemberResult {
	ctx, cancel := context.WithTimeout(ctx, m.s.MemberTimeout)
	defer cancel()
	msgs := []llm.Message{{Role: "system", Content: a.System}, {Role: "user", Content: a.User}}
	out := make([]schemas.MemberResult, len(panel))
	var wg sync.WaitGroup
	for i, model := range panel {
		wg.Go(func() { out[i], _ = m.call(ctx, RolePanel, model, msgs, m.s.MemberMaxTokens) })
	}
	wg.Wait()
	return out
}
