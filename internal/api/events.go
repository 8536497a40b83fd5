package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
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
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives any write timeout
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	var last []byte
	sendStatus := func() error {
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
		return event(w, rc, "status", b)
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
			_ = sendStatus()
			_ = event(w, rc, "report", e.Value())
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
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				return nil
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
		}
	}
}

// event writes one SSE event of name with data (JSON on one line).
func event(w http.ResponseWriter, rc *http.ResponseController, name string, data []byte) error {
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b.Bytes()); err != nil {
		return err
	}
	return rc.Flush()
}
