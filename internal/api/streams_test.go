package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/schemas"
)

// openStream sends GET path with key and returns the answer's status; a
// 200 stream stays open until ctx ends.
func (e *apiEnv) openStream(ctx context.Context, path, key string) int {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.http.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
	} else {
		go func() { <-ctx.Done(); resp.Body.Close() }()
	}
	return resp.StatusCode
}

// TestEventStreamCaps: a key holds at most MaxStreamsPerKey event streams
// (429 above), the server MaxStreams (503 above); a closed stream frees
// its slot.
func TestEventStreamCaps(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{MaxStreamsPerKey: 2, MaxStreams: 3, RatePerSec: 1000, Burst: 1000}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := e.submit(alpha, hanoi(3))
	b := e.submit(beta, hanoi(3))
	pathA, pathB := "/v1/jobs/"+a.ID+"/events", "/v1/jobs/"+b.ID+"/events"

	first, closeFirst := context.WithCancel(ctx)
	defer closeFirst()
	if got := e.openStream(first, pathA, e.key[alpha]); got != http.StatusOK {
		t.Fatalf("alpha's first stream: %d", got)
	}
	if got := e.openStream(ctx, pathA, e.key[alpha]); got != http.StatusOK {
		t.Fatalf("alpha's second stream: %d", got)
	}
	e.json(http.MethodGet, pathA, e.key[alpha], nil).problem(t, http.StatusTooManyRequests, api.TypeRateLimited)
	if got := e.openStream(ctx, pathB, e.key[beta]); got != http.StatusOK {
		t.Fatalf("beta's first stream: %d", got)
	}
	e.json(http.MethodGet, pathB, e.key[beta], nil).problem(t, http.StatusServiceUnavailable, api.TypeUnavailable)

	closeFirst() // its slot is free once its handler returns
	for {
		sctx, stop := context.WithCancel(ctx)
		got := e.openStream(sctx, pathA, e.key[alpha])
		stop()
		if got == http.StatusOK {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a closed stream's slot was not freed: %d", got)
		}
	}
}

// TestEventStreamTenantCap: a tenant's keys together hold at most
// MaxStreamsPerTenant event streams: a tenant given many keys cannot take
// the NATS consumers every tenant shares (each stream watches with one),
// and another tenant still gets its streams.
func TestEventStreamTenantCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{MaxStreamsPerKey: 2, MaxStreamsPerTenant: 3, MaxStreams: 100, RatePerSec: 1000, Burst: 1000}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second, _, err := e.keys.Create(ctx, apikey.CreateOptions{Tenant: alpha})
	if err != nil {
		t.Fatal(err)
	}
	a := e.submit(alpha, hanoi(3))
	b := e.submit(beta, hanoi(3))
	pathA, pathB := "/v1/jobs/"+a.ID+"/events", "/v1/jobs/"+b.ID+"/events"
	for i, key := range []string{e.key[alpha], e.key[alpha], second} {
		if got := e.openStream(ctx, pathA, key); got != http.StatusOK {
			t.Fatalf("alpha's stream %d: %d", i+1, got)
		}
	}
	// The second key holds one stream of its own two, but alpha holds 3.
	pr := e.json(http.MethodGet, pathA, second, nil).problem(t, http.StatusTooManyRequests, api.TypeRateLimited)
	if !strings.Contains(pr.Detail, "tenant") {
		t.Errorf("refusal %q does not name the tenant's limit", pr.Detail)
	}
	if got := e.openStream(ctx, pathB, e.key[beta]); got != http.StatusOK {
		t.Fatalf("beta's stream beside alpha's full share: %d", got)
	}
}

// TestEventStreamEndsOnRevoke: the stream of a key revoked meanwhile ends
// (at its next ping or event), as a new request of that key is refused.
func TestEventStreamEndsOnRevoke(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{Heartbeat: 20 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := e.submit(alpha, hanoi(3))
	events := e.stream(ctx, "/v1/jobs/"+c.ID+"/events", e.key[alpha])
	if ev := <-events; ev.name != "status" {
		t.Fatalf("first event %+v, want status", ev)
	}
	if _, err := e.keys.Revoke(ctx, e.key[alpha]); err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if ev.name != "" {
			t.Errorf("event %q sent after the key was revoked", ev.name)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the revoked key's stream did not end")
	}
}

// stallingBatches sends an endless batch output and reports how its
// stream ended.
type stallingBatches struct {
	api.Batches
	done chan error
}

func (b stallingBatches) Get(context.Context, string, string) (schemas.BatchRecord, error) {
	return schemas.BatchRecord{}, nil
}

func (b stallingBatches) Output(ctx context.Context, _, _ string, w io.Writer) error {
	chunk := make([]byte, 64<<10)
	for {
		if _, err := w.Write(chunk); err != nil {
			b.done <- err
			return err
		}
	}
}

// TestBatchOutputStalledClient: a client that stops reading a batch's
// output is cut off after StreamWriteTimeout; the stream's handler ends.
func TestBatchOutputStalledClient(t *testing.T) {
	t.Parallel()
	sb := stallingBatches{done: make(chan error, 1)}
	e := newEnv(t, options{
		cfg:     api.Config{StreamWriteTimeout: 100 * time.Millisecond},
		batches: func(b api.Batches) api.Batches { sb.Batches = b; return sb },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The client reads the headers, then nothing.
	if got := e.openStream(ctx, "/v1/batches/batch_1/output", e.key[alpha]); got != http.StatusOK {
		t.Fatalf("output: %d", got)
	}
	select {
	case err := <-sb.done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the stalled stream ended with %v, want a write deadline", err)
		}
	case <-ctx.Done():
		t.Fatal("the output stream to a client that reads nothing never ended")
	}
}
