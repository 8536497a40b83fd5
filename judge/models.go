package judge

import (
	"context"
	"fmt"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/judge/panel"
	"github.com/makerfleet/makerfleet/schemas"
)

// Completer calls one model (panel.Completer); tests may supply another
// through Config.NewCompleter.
type Completer = panel.Completer

// Endpoint is where a model lives: its base URL, key and wire name.
type Endpoint = panel.Endpoint

// Roles of a model call in MemberResult.Role.
const (
	RolePanel = panel.RolePanel
	RoleJudge = panel.RoleJudge
)

// endpoints resolves model names to where they live, from the settings
// and the judge's defaults (base URL, key, the environment of APIKeyEnv).
type endpoints struct {
	s       *Settings
	baseURL string
	apiKey  string
	getenv  func(string) string
}

// model resolves model name to its endpoint.
func (e *endpoints) model(name string) Endpoint {
	ms := e.s.Models[name]
	ep := Endpoint{BaseURL: ms.BaseURL, APIKey: e.apiKey, Model: ms.APIModel}
	if ep.BaseURL == "" {
		ep.BaseURL = e.baseURL
	}
	if ms.APIKeyEnv != "" {
		ep.APIKey = e.getenv(ms.APIKeyEnv)
	}
	if ep.Model == "" {
		ep.Model = name
	}
	return ep
}

// passthrough resolves the pass-through endpoint pt.
func (e *endpoints) passthrough(pt *Passthrough) Endpoint {
	ep := Endpoint{BaseURL: pt.BaseURL, APIKey: e.apiKey}
	if ep.BaseURL == "" {
		ep.BaseURL = e.baseURL
	}
	if pt.APIKeyEnv != "" {
		ep.APIKey = e.getenv(pt.APIKeyEnv)
	}
	return ep
}

// reachable checks that every configured panel member and the judge (or
// the pass-through endpoint) has a base URL.
func (e *endpoints) reachable(p *panel.Panel) error {
	if pt := e.s.Passthrough; pt != nil {
		if e.passthrough(pt).BaseURL == "" {
			return fmt.Errorf("%w: the passthrough endpoint has no base_url and the judge has no default (--llm-base-url)", ErrConfig)
		}
		return nil
	}
	names := append([]string{e.s.JudgeModel, e.s.Arbitration.JudgeModel}, e.s.Arbitration.Panel...)
	for _, p := range e.s.Panels {
		names = append(names, p...)
	}
	if err := p.Reachable(names...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
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

// ask puts the assembled question to the panel's members in parallel,
// under the panel deadline (MemberTimeout), each answer bounded by
// MemberMaxTokens.
func (sv *Service) ask(ctx context.Context, members []string, a Assembled) []schemas.MemberResult {
	msgs := []llm.Message{{Role: "system", Content: a.System}, {Role: "user", Content: a.User}}
	return sv.panel.Ask(ctx, members, msgs, sv.s.MemberMaxTokens, sv.s.MemberTimeout)
}
