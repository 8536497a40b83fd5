package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
)

// jobEvents is GET /v1/jobs/{id}/events: Server-Sent Events. "status"
// (a job_status) now and on every change, "report" (the job_report) once
// the job finishes, then the stream ends; ": ping" every Heartbeat.
//
// A key holds at most MaxStreamsPerKey streams (429 above), the server
// MaxStreams (503 above). Before each event and ping the key is checked
// again: the stream of a revoked key ends. A client that reads nothing
// for StreamWriteTimeout is cut off.
func (s *Server) jobEvents(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	tenant, id, err := jobRef(r, p)
	if err != nil {
		return err
	}
	ctx := r.Context()
	topo := s.deps.Topo
	gctx, cancel := s.timeout(ctx)
	_, _, err = jobs.Get(gctx, topo, tenant, id)
	cancel()
	if err != nil {
		return err
	}
	release, pe := s.streams.take(p)
	if pe != nil {
		return pe
	}
	defer release()
	// Watch first, then read: no change falls between the two.
	key := bus.JobKey(tenant, id)
	reports, err := topo.Reports.Watch(ctx, key)
	if err != nil {
		return fmt.Errorf("%w: watch report: %w", jobs.ErrUnavailable, err)
	}
	defer func() { _ = reports.Stop() }()
	statuses, err := topo.Status.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("%w: watch status: %w", jobs.ErrUnavailable, err)
	}
	defer func() { _ = statuses.Stop() }()

	rc := http.NewResponseController(w)
	out := &deadlineWriter{w: w, rc: rc, d: s.cfg.StreamWriteTimeout}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	var last []byte
	sendStatus := func() error {
		if s.keyRevoked(ctx, r) {
			return errKeyRevoked
		}
		sctx, cancel := s.timeout(ctx)
		st, err := jobs.Status(sctx, topo, tenant, id)
		cancel()
		if err != nil {
			return err
		}
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if bytes.Equal(b, last) {
			return nil
		}
		last = b
		return event(out, "status", b)
	}
	if err := sendStatus(); err != nil {
		return nil // the stream has begun: it just ends
	}
	var ping <-chan time.Time
	if s.cfg.Heartbeat > 0 {
		t := time.NewTicker(s.cfg.Heartbeat)
		defer t.Stop()
		ping = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return nil
		case e, ok := <-reports.Updates():
			if !ok {
				return nil
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var rep schemas.JobReport
			if schemas.Decode(e.Value(), &rep) != nil {
				continue
			}
			if sendStatus() == nil {
				_ = event(out, "report", e.Value())
			}
			return nil
		case e, ok := <-statuses.Updates():
			if !ok {
				return nil
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if err := sendStatus(); err != nil {
				return nil
			}
		case <-ping:
			if s.keyRevoked(ctx, r) {
				return nil
			}
			if _, err := out.Write([]byte(": ping\n\n")); err != nil {
				return nil
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
		}
	}
}

// errKeyRevoked ends an event stream whose key no longer authenticates.
var errKeyRevoked = errors.New("api: the stream's API key is revoked")

// keyRevoked reports whether r's key is now refused (unknown or revoked).
// A failure to read the keys is not a refusal: the stream goes on.
func (s *Server) keyRevoked(ctx context.Context, r *http.Request) bool {
	_, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	actx, cancel := s.timeout(ctx)
	defer cancel()
	_, err := s.deps.Auth.Authenticate(actx, strings.TrimSpace(key))
	return errors.Is(err, apikey.ErrUnauthorized)
}

// event writes one SSE event of name with data (JSON on one line) and
// flushes it.
func event(w *deadlineWriter, name string, data []byte) error {
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b.Bytes()); err != nil {
		return err
	}
	return w.rc.Flush()
}

// deadlineWriter gives each write to a streamed answer a deadline d from
// its start (none when d is 0; the server's WriteTimeout is lifted
// either way): a client that stops reading is cut off, one that reads
// slowly is not.
type deadlineWriter struct {
	w  io.Writer
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	var at time.Time
	if w.d > 0 {
		at = time.Now().Add(w.d)
	}
	_ = w.rc.SetWriteDeadline(at)
	return w.w.Write(b)
}
