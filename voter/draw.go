package voter

// Drawing a request's samples: one model call a sample, or one call with n
// for those of one temperature, and handing the answers on as they come.

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/schemas"
	"github.com/makerfleet/makerfleet/task"
)

// answer draws members' samples and publishes their answers as they come:
// those ready within Config.ResultLinger of the first in one message
// (SampleResult.Also), so a slow or hung call holds back no other
// sample's answer longer than the linger. A failure that hands
// the request back hands back every sample not answered (those answered
// are answered again on the next delivery: the tally counts a duplicate
// once). Its error is the request's fate, as handle's.
func (v *Voter) answer(ctx, callCtx context.Context, cancel context.CancelFunc, msg jetstream.Msg, inst task.Instance, members []schemas.SampleRequest, call llm.Request) error {
	out := make([]drawn, len(members))
	ready := make(chan []int, len(members))
	done := make(chan struct{})
	go func() {
		defer close(done)
		v.draw(callCtx, members, call, out, func(i ...int) { ready <- i })
	}()
	defer func() { <-done }() // every call ended before the request is settled
	var handBack, failed error
	pause := false
	reqs := make([]*schemas.SampleRequest, 0, len(members))
	results := make([]schemas.SampleResult, 0, len(members))
	for left := len(members); left > 0; {
		// One answer, then those ready within the linger: one message.
		batch := <-ready
		left -= len(batch)
		batch, left = gather(ready, batch, left, v.cfg.ResultLinger)
		if failed != nil {
			continue // a publish failed: the rest is handed back with it
		}
		// In the request's order, whatever order the calls ended in: a
		// message's id is its first answer's, so a copy of the request
		// whose answers come grouped alike is dropped by the results
		// stream whichever call ended first.
		slices.Sort(batch)
		reqs, results = reqs[:0], results[:0]
		for _, i := range batch {
			m, d := &members[i], out[i]
			if d.err == nil {
				v.faults.served(cmp.Or(m.Model, v.cfg.Model))
				res := Judge(inst, m, d.resp)
				if res.Outcome == schemas.OutcomeVote {
					v.votes.Add(1)
				} else {
					v.redFlags.Add(1)
				}
				reqs, results = append(reqs, m), append(results, res)
				continue
			}
			res, wait, fate := v.failed(ctx, callCtx, msg, m, d.resp, d.err)
			if res != nil {
				reqs, results = append(reqs, m), append(results, *res)
				pause = pause || wait
				continue
			}
			if handBack == nil {
				handBack = fate
			}
		}
		if err := v.replyMany(ctx, msg, reqs, results); err != nil {
			failed = err
			cancel() // the request goes back: its other calls need not finish
		}
	}
	if failed != nil {
		return failed
	}
	if pause {
		// A model that refused a request for good: this worker pauses
		// (holding its slot, the answers published), so a misconfigured
		// voter does not burn through the queue.
		select {
		case <-time.After(v.cfg.ModelErrorDelay):
		case <-ctx.Done():
		}
	}
	return handBack
}

// gather adds to batch the answers ready within linger of it, at most
// left of them: the siblings of a wave end close together, and the
// step needs them all in the common case (a wave is what a decision
// asks), so one message for them costs the decision nothing, while a
// slow or hung call holds the others back at most linger.
func gather(ready <-chan []int, batch []int, left int, linger time.Duration) ([]int, int) {
	var timeout <-chan time.Time
	if linger > 0 && left > 0 {
		t := time.NewTimer(linger)
		defer t.Stop()
		timeout = t.C
	}
	for left > 0 {
		select {
		case is := <-ready:
			batch = append(batch, is...)
			left -= len(is)
			continue
		default:
		}
		if timeout == nil {
			break
		}
		select {
		case is := <-ready:
			batch = append(batch, is...)
			left -= len(is)
		case <-timeout:
			return batch, left
		}
	}
	return batch, left
}

// drawn is one sample's model answer.
type drawn struct {
	resp llm.Response
	err  error
}

// NModel is implemented by models that can say whether they answer a
// call's n > 1 with n choices for a model (a router over deployments
// that support it).
type NModel interface {
	SupportsN(model string) bool
}

// draw asks the model for the samples of members (one request and its
// Also), call being the first's, at once: the members of one temperature
// in one call with n of them when the model answers n (the prompt paid
// once: the first sample carries the prompt tokens, the completion tokens
// are shared by each choice's length), else one call each with its own
// seed. A sample at temperature 0 is always drawn alone, and a choice the
// server left out (one ignoring n) is drawn alone. At most Concurrency
// calls are in flight across the voter's requests: a wave in one request
// asks no more of the provider than its samples one a request did. Each
// answer goes in out, and ready says which are set: those of one call
// together.
func (v *Voter) draw(ctx context.Context, members []schemas.SampleRequest, call llm.Request, out []drawn, ready func(i ...int)) {
	complete := func(c llm.Request) (llm.Response, error) {
		select {
		case v.calls <- struct{}{}:
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
		defer func() { <-v.calls }()
		v.modelCalls.Add(1)
		spanCtx, end := v.traceCall(ctx, &c)
		resp, err := v.model.Complete(spanCtx, c)
		end(resp, err)
		return resp, err
	}
	one := func(i int) {
		c := call
		seed := members[i].Seed
		c.Seed, c.N, c.Temperature = &seed, 1, members[i].Temperature
		out[i].resp, out[i].err = complete(c)
		ready(i)
	}
	if len(members) == 1 {
		one(0)
		return
	}
	// Groups of one temperature, in the order of their first member.
	var groups [][]int
	nOK := v.supportsN(cmp.Or(call.Model, v.cfg.Model))
	for i := range members {
		t := members[i].Temperature
		j := slices.IndexFunc(groups, func(g []int) bool { return members[g[0]].Temperature == t })
		if !nOK || t <= 0 || j < 0 {
			groups = append(groups, []int{i})
			continue
		}
		groups[j] = append(groups[j], i)
	}
	var mu sync.Mutex
	var rest []int // choices a server left out, drawn alone after
	together := func(g []int) {
		c := call
		seed := members[g[0]].Seed
		c.Seed, c.N, c.Temperature = &seed, len(g), members[g[0]].Temperature
		resp, err := complete(c)
		shares := splitTokens(resp)
		set := make([]int, 0, len(g))
		for k, i := range g {
			switch {
			case err != nil:
				out[i].err = err
			case k < len(resp.Choices):
				r := resp
				r.Choices = resp.Choices[k : k+1]
				r.CompletionTokens = shares[k]
				if k > 0 {
					r.PromptTokens, r.CachedPromptTokens = 0, 0 // the call's prompt is billed once
				}
				out[i].resp = r
			default:
				mu.Lock()
				rest = append(rest, i)
				mu.Unlock()
				continue // drawn alone after
			}
			set = append(set, i)
		}
		if len(set) > 0 {
			ready(set...)
		}
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		if len(g) == 1 {
			wg.Go(func() { one(g[0]) })
			continue
		}
		wg.Go(func() { together(g) })
	}
	wg.Wait()
	for _, i := range rest {
		wg.Go(func() { one(i) })
	}
	wg.Wait()
}

// supportsN reports whether the voter may ask its model for n choices.
func (v *Voter) supportsN(model string) bool {
	m := v.model
	if t, ok := m.(timedModel); ok {
		m = t.Model // the model the metrics time
	}
	if nm, ok := m.(NModel); ok {
		return nm.SupportsN(model)
	}
	return v.cfg.SupportsN && model == v.cfg.Model
}

// splitTokens shares a call's completion tokens among its choices by the
// length of each, summing to the call's figure.
func splitTokens(resp llm.Response) []int {
	n := len(resp.Choices)
	shares := make([]int, n)
	if n == 0 {
		return shares
	}
	total, bytes := resp.CompletionTokens, 0
	for _, c := range resp.Choices {
		bytes += len(c.Content)
	}
	given := 0
	for i, c := range resp.Choices {
		if bytes > 0 {
			shares[i] = total * len(c.Content) / bytes
		} else {
			shares[i] = total / n
		}
		given += shares[i]
	}
	shares[n-1] += total - given
	return shares
}
