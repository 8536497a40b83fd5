package api

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/makerfleet/makerfleet/internal/apikey"
)

// limiters are the request rate limits of this process, one token bucket
// per API key (by key id): the key's own rate, or the server's default.
// There are as many as keys that made requests: keys are few (an admin
// makes them), so the map is not trimmed.
type limiters struct {
	def   rate.Limit
	burst int
	now   func() time.Time

	mu   sync.Mutex
	byID map[string]*rate.Limiter
}

func newLimiters(perSec float64, burst int) *limiters {
	return &limiters{def: rate.Limit(perSec), burst: burst, now: time.Now, byID: map[string]*rate.Limiter{}}
}

// allow takes one request's token of p's bucket, or returns the 429 that
// says when to come back. A key's changed rate applies at its next
// request.
func (l *limiters) allow(p apikey.Principal) *problemError {
	lim, burst := l.def, l.burst
	if p.RatePerSec > 0 {
		lim = rate.Limit(p.RatePerSec)
		burst = max(p.Burst, int(math.Ceil(p.RatePerSec)), 1)
	}
	if lim == 0 {
		return nil // no limit
	}
	now := l.now()
	l.mu.Lock()
	b := l.byID[p.KeyID]
	if b == nil {
		b = rate.NewLimiter(lim, burst)
		l.byID[p.KeyID] = b
	} else if b.Limit() != lim || b.Burst() != burst {
		b.SetLimitAt(now, lim)
		b.SetBurstAt(now, burst)
	}
	l.mu.Unlock()
	res := b.ReserveN(now, 1)
	if !res.OK() {
		return rateLimited(time.Second)
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return rateLimited(d)
	}
	return nil
}

func rateLimited(d time.Duration) *problemError {
	pe := problem(TypeRateLimited, "this API key's request rate limit is reached; retry after %s", d.Round(time.Millisecond))
	pe.retryAfter = max(1, int(math.Ceil(d.Seconds())))
	return pe
}

// streamSlots bound the event streams open at once: perKey for one API
// key (by key id), perTenant for all of one tenant's keys (each stream
// holds NATS consumers, which every tenant shares: no tenant takes them
// all), total for the server.
type streamSlots struct {
	perKey, perTenant, total int

	mu       sync.Mutex
	open     int
	byKey    map[string]int
	byTenant map[string]int
}

func newStreamSlots(perKey, perTenant, total int) *streamSlots {
	return &streamSlots{perKey: perKey, perTenant: perTenant, total: total, byKey: map[string]int{}, byTenant: map[string]int{}}
}

// take reserves one stream of p's key and returns the func that frees it,
// or the problem that refuses the stream: 429 when the key holds perKey
// streams or its tenant perTenant, 503 when the server holds total.
func (s *streamSlots) take(p apikey.Principal) (release func(), _ *problemError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey[p.KeyID] >= s.perKey {
		pe := problem(TypeRateLimited, "this API key has %d event streams open, the most it may; close one", s.perKey)
		pe.retryAfter = 1
		return nil, pe
	}
	if s.byTenant[p.Tenant] >= s.perTenant {
		pe := problem(TypeRateLimited, "tenant %s has %d event streams open, the most a tenant may; close one", p.Tenant, s.perTenant)
		pe.retryAfter = 1
		return nil, pe
	}
	if s.open >= s.total {
		pe := problem(TypeUnavailable, "the server has %d event streams open, the most it serves; try again", s.total)
		pe.retryAfter = 1
		return nil, pe
	}
	s.open++
	s.byKey[p.KeyID]++
	s.byTenant[p.Tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.open--
			if s.byKey[p.KeyID]--; s.byKey[p.KeyID] == 0 {
				delete(s.byKey, p.KeyID)
			}
			if s.byTenant[p.Tenant]--; s.byTenant[p.Tenant] == 0 {
				delete(s.byTenant, p.Tenant)
			}
		})
	}, nil
}
