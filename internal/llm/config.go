package llm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults applied by New to zero-valued Config fields.
const (
	DefaultAttemptTimeout = 60 * time.Second
	DefaultMaxAttempts    = 6
	DefaultBackoffBase    = 250 * time.Millisecond
	DefaultBackoffMax     = 20 * time.Second
	DefaultMaxRetryAfter  = 60 * time.Second
	// DefaultBadResponseAttempts: a reply that is not a usable chat
	// completion is tried three times; then the call ends (ErrBadResponse).
	DefaultBadResponseAttempts = 3
)

// MaxUsageTokens bounds each usage figure a reply may report (prompt and
// completion tokens): far above any model's context window, so a figure
// beyond it is a broken or lying server, and it never reaches cost
// accounting.
const MaxUsageTokens = 10_000_000

// Config configures a Client. Zero values take the documented defaults.
type Config struct {
	// BaseURL of the OpenAI-compatible API including its version prefix,
	// e.g. http://127.0.0.1:8080/v1. Required; http or https.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>". Optional: when empty
	// no Authorization header is sent (local servers).
	APIKey string
	// Model name sent with every completion. Required.
	Model string
	// Stream asks for every completion as a stream ("stream": true with
	// stream_options.include_usage) and joins the chunks into the same
	// Response: for providers that serve some models only streamed, or
	// answer long generations faster that way. Default false.
	Stream bool
	// AttemptTimeout bounds one HTTP attempt (headers and body). An attempt
	// that times out is retried. Default 60s.
	AttemptTimeout time.Duration
	// MaxAttempts is the total number of attempts including the first.
	// Default 6; 1 disables retries.
	MaxAttempts int
	// BackoffBase is the first backoff ceiling; it doubles per failed
	// attempt and the wait is uniform in [0, ceiling) ("full jitter").
	// Default 250ms.
	BackoffBase time.Duration
	// BackoffMax caps the backoff ceiling. Default 20s; must be >= BackoffBase.
	BackoffMax time.Duration
	// MaxRetryAfter is the longest server-requested wait (Retry-After,
	// retry-after-ms) the client sits out itself. A longer one ends the call
	// with a *RetryLaterError carrying the delay, so the caller can
	// reschedule instead of holding a worker slot. Default 60s.
	MaxRetryAfter time.Duration
	// BadResponseAttempts is how many attempts of one call may end in a 2xx
	// reply that cannot be used (not JSON, no choice, usage negative or
	// above MaxUsageTokens) before the call ends with ErrBadResponse; it
	// counts within MaxAttempts, so at most MaxAttempts. Default 3.
	BadResponseAttempts int
	// HTTPClient performs the requests. Default: a client with keep-alives
	// and enough idle connections per host for hundreds of concurrent calls.
	// Its Timeout should be zero or larger than AttemptTimeout.
	HTTPClient *http.Client
	// Sleep waits between attempts; it must return ctx's error early when
	// ctx ends. Test hook; default a timer that honours ctx.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a float in [0, 1) for jitter; it must be safe for
	// concurrent use. Test hook; default math/rand/v2.Float64.
	Rand func() float64
	// Now is the clock used to turn a Retry-After HTTP-date into a delay.
	// Test hook; default time.Now.
	Now func() time.Time
	// OnRetry, when set, is called before each wait between attempts, for
	// logs and metrics (rate limits are worth seeing). Must not block.
	OnRetry func(RetryEvent)
	// OnResponse, when set, is called with every HTTP response's status
	// and headers before its body is read (a provider's rate-limit
	// headers: ProviderHold). It runs in the calling goroutine and should
	// be quick.
	OnResponse func(status int, h http.Header)
}

// RetryEvent describes a failed attempt that is about to be retried.
type RetryEvent struct {
	Attempt int           // the attempt that failed, 1-based
	Delay   time.Duration // wait before the next attempt
	Err     error         // why the attempt failed
}

// withDefaults validates cfg and fills in defaults.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	if cfg.BaseURL == "" {
		errs = append(errs, errors.New("missing BaseURL"))
	} else if u, err := url.Parse(cfg.BaseURL); err != nil {
		errs = append(errs, fmt.Errorf("BaseURL %q: %w", cfg.BaseURL, err))
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("BaseURL %q: want http(s)://host[:port]/path", cfg.BaseURL))
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if strings.TrimSpace(cfg.Model) == "" {
		errs = append(errs, errors.New("missing Model"))
	}
	neg := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("negative %s %s", name, d))
		}
	}
	neg("AttemptTimeout", cfg.AttemptTimeout)
	neg("BackoffBase", cfg.BackoffBase)
	neg("BackoffMax", cfg.BackoffMax)
	neg("MaxRetryAfter", cfg.MaxRetryAfter)
	if cfg.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("negative MaxAttempts %d", cfg.MaxAttempts))
	}
	if cfg.BadResponseAttempts < 0 {
		errs = append(errs, fmt.Errorf("negative BadResponseAttempts %d", cfg.BadResponseAttempts))
	}
	if cfg.AttemptTimeout == 0 {
		cfg.AttemptTimeout = DefaultAttemptTimeout
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.BadResponseAttempts == 0 {
		cfg.BadResponseAttempts = DefaultBadResponseAttempts
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = DefaultBackoffBase
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.MaxRetryAfter == 0 {
		cfg.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if cfg.BackoffBase > 0 && cfg.BackoffMax > 0 && cfg.BackoffMax < cfg.BackoffBase {
		errs = append(errs, fmt.Errorf("backoff cap BackoffMax %s below BackoffBase %s", cfg.BackoffMax, cfg.BackoffBase))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("llm: invalid config: %w", err)
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg, nil
}

// newHTTPClient is the default client. Go's default transport keeps only 2
// idle connections per host, so hundreds of concurrent voters would open and
// close a connection per call; keep many warm instead. No Client.Timeout:
// the per-attempt context bounds each request.
func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}

// sleepCtx waits for d or until ctx ends, whichever is first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
