package providers_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/providers"
	"github.com/makerfleet/makerfleet/internal/ratelimit"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// BenchmarkFleetLimits: 8 voters (each its own router and HTTP clients),
// 16 calls in flight each, share one deployment whose provider (the
// simulated model with --rpm or --tpm) answers 429 beyond its limit. With
// the fleet-wide limiter in Redis the voters pace themselves as one
// client; the reference run, in the same process, has each voter learn
// the limit from its own 429s. It prints the 429 share of calls and the
// answered calls (tokens) per second after the first two seconds beside
// the limit's. Run with -benchtime=1x (each run lasts benchDuration
// whatever b.N).
func BenchmarkFleetLimits(b *testing.B) {
	const (
		voters        = 8
		perVoter      = 16
		benchDuration = 10 * time.Second
		warmup        = 2 * time.Second
	)
	rdb := testkit.StartRedis(b).Client(b)
	for _, lc := range []struct {
		name     string
		rpm, tpm int64
	}{
		{"rpm=1200", 1200, 0},
		{"tpm=60000", 0, 60_000},
	} {
		for _, shared := range []bool{true, false} {
			mode := "fleet-limiter"
			if !shared {
				mode = "reference-429s-only"
			}
			b.Run(lc.name+"/"+mode, func(b *testing.B) {
				s, err := simllm.New(simllm.Config{RPM: lc.rpm, TPM: lc.tpm})
				if err != nil {
					b.Fatal(err)
				}
				ts := httptest.NewServer(s)
				defer ts.Close()
				name := fmt.Sprintf("bench-%d", time.Now().UnixNano())
				d := schemas.Deployment{Name: name, BaseURL: ts.URL + "/v1", Model: "sim-1", RPM: lc.rpm, TPM: lc.tpm}
				var limiter *ratelimit.Limiter
				if shared {
					if limiter, err = ratelimit.New(rdb, ratelimit.Config{}); err != nil {
						b.Fatal(err)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), benchDuration)
				defer cancel()
				var wg sync.WaitGroup
				for range voters {
					r, err := providers.NewRouter(providers.Config{Model: "sim-1", Source: providers.StaticSource([]schemas.Deployment{d}), Limiter: limiter,
						LLM: llm.Config{MaxAttempts: 6, MaxRetryAfter: time.Minute}, Logger: slog.New(slog.DiscardHandler)})
					if err != nil {
						b.Fatal(err)
					}
					defer r.Close()
					for range perVoter {
						wg.Go(func() {
							for ctx.Err() == nil {
								// Failed calls (out of retries on 429s,
								// the deployment out) are the reference's
								// cost; their 429s are counted below.
								_, _ = r.Complete(ctx, llm.Request{Messages: []llm.Message{{Role: "user", Content: "Name a prime number below one hundred."}}, MaxTokens: 64, Temperature: 0.1})
							}
						})
					}
				}
				// The first seconds hold the provider's initial burst (its
				// bucket starts full): the rate is measured after them.
				var st0 simllm.Stats
				var t0 time.Time
				select {
				case <-time.After(warmup):
					st0, t0 = s.Stats(), time.Now()
				case <-ctx.Done():
				}
				wg.Wait()
				secs := time.Since(t0).Seconds()
				st := s.Stats()
				calls := st.Requests - st.Canceled
				share := 100 * float64(st.OverLimit) / float64(max(calls, 1))
				var got, limit float64
				if lc.rpm > 0 {
					got, limit = float64(st.Completions-st0.Completions)/secs, float64(lc.rpm)/60
				} else {
					got, limit = float64(st.PromptTokens+st.CompletionTokens-st0.PromptTokens-st0.CompletionTokens)/secs, float64(lc.tpm)/60
				}
				b.ReportMetric(share, "429s_%")
				b.ReportMetric(got, "per_s")
				b.ReportMetric(limit, "limit_per_s")
				b.ReportMetric(100*got/limit, "of_limit_%")
				b.Logf("%s %s: %d calls, %d answered, %d 429s (%.2f%%); %.1f/s of a limit of %.1f/s (%.0f%%)",
					lc.name, mode, calls, st.Completions, st.OverLimit, share, got, limit, 100*got/limit)
			})
		}
	}
}
