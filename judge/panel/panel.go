// Package panel asks several models the same question at once: the
// judge's panel (break glass and arbitration) and its judge model. It
// keeps one client per model, calls the members in parallel under one
// deadline, and reports each call as a schemas.MemberResult (tokens, cost,
// latency, the error with any key redacted). What to ask, which models and
// what a call costs are the judge's (package judge): the panel only asks.
package panel

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
// supply another.
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

// ErrNoEndpoint: a model has no base URL to call it at.
var ErrNoEndpoint = errors.New("panel: model has no base_url")

// Config says where the models live and what their calls cost.
type Config struct {
	// Endpoint resolves a model's name to where it lives (no BaseURL:
	// nowhere).
	Endpoint func(model string) Endpoint
	// NewCompleter builds the client of an endpoint.
	NewCompleter func(Endpoint) (Completer, error)
	// Cost prices a call of model (US dollars).
	Cost func(model string, promptTokens, completionTokens int64) float64
}

// Panel calls models, one client per model, created on first use and
// closed by Close. It is safe for concurrent use.
type Panel struct {
	cfg Config

	mu      sync.Mutex
	clients map[string]Completer
}

// New returns a panel over cfg; every field of cfg is required.
func New(cfg Config) (*Panel, error) {
	if cfg.Endpoint == nil || cfg.NewCompleter == nil || cfg.Cost == nil {
		return nil, errors.New("panel: Endpoint, NewCompleter and Cost are required")
	}
	return &Panel{cfg: cfg, clients: make(map[string]Completer)}, nil
}

// Reachable reports the first of models without a base URL
// (ErrNoEndpoint naming it).
func (p *Panel) Reachable(models ...string) error {
	for _, name := range models {
		if p.cfg.Endpoint(name).BaseURL == "" {
			return fmt.Errorf("%w: model %s (and no default, --llm-base-url)", ErrNoEndpoint, name)
		}
	}
	return nil
}

func (p *Panel) client(name string) (Completer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[name]; ok {
		return c, nil
	}
	if err := p.Reachable(name); err != nil {
		return nil, err
	}
	c, err := p.cfg.NewCompleter(p.cfg.Endpoint(name))
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	p.clients[name] = c
	return c, nil
}

// Close closes every client that has a Close method.
func (p *Panel) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.clients {
		if cl, ok := c.(interface{ Close() }); ok {
			cl.Close()
		}
	}
	clear(p.clients)
}

// Call makes one model call and reports it as a MemberResult; text is the
// reply. A call that fails is reported with OK false and its error, keys
// redacted.
func (p *Panel) Call(ctx context.Context, role, model string, msgs []llm.Message, maxTokens int) (res schemas.MemberResult, text string) {
	start := time.Now()
	res = schemas.MemberResult{Model: model, Role: role}
	c, err := p.client(model)
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
	res.CostUSD = p.cfg.Cost(model, res.PromptTokens, res.CompletionTokens)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			err = fmt.Errorf("no answer before the panel deadline: %w", err)
		}
		res.Error = guard.Redact(err.Error())
	}
	return res, res.Response
}

// Ask calls every member in parallel with msgs under one deadline
// (timeout) and returns their results in members' order. A member still
// running at the deadline is cancelled and reported failed.
func (p *Panel) Ask(ctx context.Context, members []string, msgs []llm.Message, maxTokens int, timeout time.Duration) []schemas.MemberResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make([]schemas.MemberResult, len(members))
	var wg sync.WaitGroup
	for i, model := range members {
		wg.Go(func() { out[i], _ = p.Call(ctx, RolePanel, model, msgs, maxTokens) })
	}
	wg.Wait()
	return out
}
