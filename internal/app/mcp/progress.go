package mcp

import (
	"context"
	"fmt"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultProgressInterval is how often a long tool call tells the client
// it is still working: well under the 60 s request timeout of the official
// SDK clients, which a progress notification resets when the caller asks
// for it (TypeScript: resetTimeoutOnProgress).
const DefaultProgressInterval = 5 * time.Second

// progress sends notifications/progress for one tool call while it waits,
// when the client asked for them (a progressToken in the request's _meta):
// one at the start, one every interval, and one at once when the state
// changes (held for approval). Progress counts up from 1; no total is
// known. Stop ends it before the call returns its result.
type progress struct {
	req      *sdk.CallToolRequest
	token    any
	interval time.Duration
	start    time.Time

	mu    sync.Mutex
	n     float64
	state string

	kick chan struct{}
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// startProgress starts the notifications of req's call, saying state
// ("waiting for the panel"); without a progress token it does nothing and
// the returned progress's methods are no-ops.
func startProgress(ctx context.Context, req *sdk.CallToolRequest, interval time.Duration, state string) *progress {
	p := &progress{req: req, interval: interval, start: time.Now(), state: state, kick: make(chan struct{}, 1)}
	if req == nil || req.Session == nil || req.Params == nil {
		return p
	}
	if p.token = req.Params.GetProgressToken(); p.token == nil {
		return p
	}
	if p.interval <= 0 {
		p.interval = DefaultProgressInterval
	}
	ctx, p.stop = context.WithCancel(ctx)
	p.wg.Go(func() { p.run(ctx) })
	return p
}

func (p *progress) run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	p.send(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
		p.send(ctx)
	}
}

// send sends one notification; a failure (the client left) is the call's
// own to notice, through its context.
func (p *progress) send(ctx context.Context) {
	p.mu.Lock()
	p.n++
	params := &sdk.ProgressNotificationParams{
		ProgressToken: p.token,
		Progress:      p.n,
		Message:       fmt.Sprintf("%s (%s)", p.state, time.Since(p.start).Round(time.Second)),
	}
	p.mu.Unlock()
	_ = p.req.Session.NotifyProgress(ctx, params)
}

// Set changes the state the notifications report and sends one at once.
func (p *progress) Set(state string) {
	if p.stop == nil {
		return
	}
	p.mu.Lock()
	p.state = state
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Stop ends the notifications and waits for the sender.
func (p *progress) Stop() {
	if p.stop == nil {
		return
	}
	p.stop()
	p.wg.Wait()
}
