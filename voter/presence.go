package voter

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/makerfleet/makerfleet/internal/presence"
	"github.com/makerfleet/makerfleet/schemas"
)

// startPresence runs the voter's presence publisher until the returned
// stop is called (after the worker has drained: a draining voter is
// still in the view); stop deletes the record.
func (v *Voter) startPresence() (stop func()) {
	if v.cfg.NoPresence {
		return func() {}
	}
	pcfg := v.cfg.Presence
	pcfg.Namespace = v.cfg.Bus.Namespace
	if pcfg.Logger == nil {
		pcfg.Logger = v.log
	}
	pub, err := presence.NewPublisher(v.js, presence.RoleVoter, v.cfg.ID, v.presenceRecord, pcfg)
	if err != nil {
		v.log.Warn("no presence record", "err", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pub.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// Presence is the voter's presence record at now: what it serves, how
// busy it is, its counters since it started.
func (v *Voter) Presence(now time.Time) *schemas.VoterPresence {
	st := v.Stats()
	answered := st.Votes + st.RedFlags + st.Skipped + st.Cancelled
	failed, limited := v.cfg.Metrics.ErrorTotals()
	host, _ := os.Hostname()
	models := append([]string{v.cfg.Model}, v.cfg.Policy.AllowModels...)
	var deps []string
	if v.cfg.Deployments != nil {
		deps = v.cfg.Deployments()
	}
	p := &schemas.VoterPresence{
		Header: schemas.NewHeader(schemas.KindVoterPresence),
		ID:     v.cfg.ID, Host: presence.Clip(host, 128), Build: presence.Clip(v.cfg.Build, 128),
		Models: capList(models), Deployments: capList(deps),
		Concurrency:     v.cfg.Concurrency,
		InFlight:        int(min(max(v.inFlight.Load(), 0), int64(v.cfg.Concurrency))),
		SamplesAnswered: answered,
		RedFlags:        min(st.RedFlags, answered),
		ProviderErrors:  failed,
		RateLimited:     min(limited, failed),
		Refused:         st.PolicyRefused + st.ProviderRefusals,
		SamplesPerS:     v.rate.observe(now, answered),
		Started:         v.started,
		At:              now,
	}
	if p.At.Before(p.Started) {
		p.At = p.Started
	}
	return p
}

func (v *Voter) presenceRecord(now time.Time) schemas.Message { return v.Presence(now) }

// capList keeps the first schemas.MaxPresenceModels names of at most 200
// bytes each (a model name's bound).
func capList(names []string) []string {
	out := make([]string, 0, min(len(names), schemas.MaxPresenceModels))
	for _, n := range names {
		if len(out) == schemas.MaxPresenceModels {
			break
		}
		if n != "" && len(n) <= 200 {
			out = append(out, n)
		}
	}
	return out
}

// rateMeter is a counter's rate between two observations.
type rateMeter struct {
	mu    sync.Mutex
	at    time.Time
	count int64
}

// observe records count at now and returns its rate per second since the
// previous observation (0 for the first).
func (r *rateMeter) observe(now time.Time, count int64) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rate float64
	if !r.at.IsZero() && now.After(r.at) && count >= r.count {
		rate = float64(count-r.count) / now.Sub(r.at).Seconds()
	}
	r.at, r.count = now, count
	return min(rate, schemas.MaxPresenceRate)
}
