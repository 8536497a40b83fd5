package store

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// group commits the RecordMany calls of concurrent jobs together: the
// first caller while none is flushing leads and sends every call queued
// by then in one pipeline; calls that come while it flushes queue up and
// go in the next pipeline, led by the first of them. A lone job pays
// nothing (it leads at once); a hundred jobs of one coordinator share a
// round trip instead of each paying its own write and read, in the
// process and in redis-server. Each call's commands stay together and in
// order, so each job's samples are recorded exactly as before.
type group struct {
	mu    sync.Mutex
	busy  bool // a leader is flushing or handing over
	queue []*groupCall
	// flushes counts pipelines sent (tests).
	flushes int
	// exec sends calls in one pipeline (a test may wrap it).
	exec func(ctx context.Context, calls []*groupCall)
	// waiting, when set, hears of each call that queues behind a leader
	// (tests).
	waiting func()
}

// groupCall is one RecordMany's commands.
type groupCall struct {
	keys []string
	args [][]any
	cmds []*redis.Cmd
	done chan struct{} // closed once cmds hold their replies
	lead chan struct{} // signalled (once) when this call is to lead
}

// do sends c with whatever else is queued and returns once its commands
// have their replies. A caller whose ctx ends before its call is taken
// leaves the queue with ctx's error; once taken, it waits for the
// pipeline (bounded by the client's timeouts), as its commands run.
func (g *group) do(ctx context.Context, c *groupCall) error {
	c.done, c.lead = make(chan struct{}), make(chan struct{}, 1)
	g.mu.Lock()
	g.queue = append(g.queue, c)
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		g.flush(ctx)
		return nil
	}
	g.mu.Unlock()
	if g.waiting != nil {
		g.waiting()
	}
	select {
	case <-c.done:
		return nil
	case <-c.lead:
		g.flush(ctx)
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(g.queue, c); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
		select {
		case <-c.lead: // it was to lead: the next one does
			g.handOver()
		default:
		}
		g.mu.Unlock()
		return ctx.Err()
	}
	g.mu.Unlock()
	<-c.done
	return nil
}

// flush sends the queue as one pipeline, then hands the lead to the
// first call queued meanwhile (or lets the next caller lead).
func (g *group) flush(ctx context.Context) {
	g.mu.Lock()
	calls := g.queue
	g.queue = nil
	g.flushes++
	g.mu.Unlock()
	// Other callers' commands ride on this pipeline: the leader's ctx
	// ending must not cut them off.
	g.exec(context.WithoutCancel(ctx), calls)
	for _, c := range calls {
		close(c.done)
	}
	g.mu.Lock()
	g.handOver()
	g.mu.Unlock()
}

// handOver passes the lead to the first queued call, or ends it. Called
// with g.mu held.
func (g *group) handOver() {
	if len(g.queue) == 0 {
		g.busy = false
		return
	}
	g.queue[0].lead <- struct{}{} // buffered: a call is designated at most once
}
