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
// again: the stream of a revoked key ends, as does the stream of a job
// purged meanwhile. A client that reads nothing for StreamWriteTimeout is
// cut off.
func (s *Server) jobEvents(w http.ResponseWriter, r *http.Request, p apikey.Principal) error {
	js, err := s.openJobStream(w, r, p)
	if err != nil {
		return err
	}
	defer js.close()
	js.begin()
	if err := js.sendStatus(); err != nil {
		return nil // the stream has begun: it just ends
	}
	for {
		select {
		case <-js.ctx.Done():
			return nil
		case <-s.closing:
			return nil
		case e, ok := <-js.reports.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				if js.purged() {
					return nil
				}
				continue
			}
			var rep schemas.JobReport
			if schemas.Decode(e.Value(), &rep) != nil {
				continue
			}
			if js.sendStatus() == nil {
				_ = event(js.out, "report", e.Value())
			}
			return nil
		case e, ok := <-js.statuses.Updates():
			if !js.onStatus(e, ok) {
				return nil
			}
		case <-js.ping:
			if !js.heartbeat() {
				return nil
			}
		}
	}
}

// jobStream is an open event stream on one job: the job's report and
// status watches, the writer, and the stream slot it holds.
type jobStream struct {
	s          *Server
	r          *http.Request
	w          http.ResponseWriter
	ctx        context.Context
	tenant, id string
	reports    jetstream.KeyWatcher
	statuses   jetstream.KeyWatcher
	rc         *http.ResponseController
	out        *deadlineWriter
	ping       <-chan time.Time
	last       []byte // the last status sent
	// suspect is set when the job's report or status was deleted: the
	// job may be being purged, so each ping checks it is still there.
	suspect bool
	closers []func()
}

// openJobStream is the set-up shared by the job event streams: the job
// must exist (404) and the key get a stream slot (429/503); then the
// job's report and status are watched (watch first, then read: no change
// falls between the two). Nothing is written yet; close releases all.
func (s *Server) openJobStream(w http.ResponseWriter, r *http.Request, p apikey.Principal) (*jobStream, error) {
	tenant, id, err := jobRef(r, p)
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	topo := s.deps.Topo
	gctx, cancel := s.timeout(ctx)
	_, _, err = jobs.Get(gctx, topo, tenant, id)
	cancel()
	if err != nil {
		return nil, err
	}
	release, pe := s.streams.take(p)
	if pe != nil {
		return nil, pe
	}
	js := &jobStream{s: s, r: r, w: w, ctx: ctx, tenant: tenant, id: id, closers: []func(){release}}
	key := bus.JobKey(tenant, id)
	if js.reports, err = topo.Reports.Watch(ctx, key); err != nil {
		js.close()
		return nil, fmt.Errorf("%w: watch report: %w", jobs.ErrUnavailable, err)
	}
	js.closers = append(js.closers, func() { _ = js.reports.Stop() })
	if js.statuses, err = topo.Status.Watch(ctx, key, jetstream.UpdatesOnly()); err != nil {
		js.close()
		return nil, fmt.Errorf("%w: watch status: %w", jobs.ErrUnavailable, err)
	}
	js.closers = append(js.closers, func() { _ = js.statuses.Stop() })
	if s.cfg.Heartbeat > 0 {
		t := time.NewTicker(s.cfg.Heartbeat)
		js.closers = append(js.closers, t.Stop)
		js.ping = t.C
	}
	return js, nil
}

// close stops the watches and the ticker and frees the stream slot.
func (js *jobStream) close() {
	for i := len(js.closers) - 1; i >= 0; i-- {
		js.closers[i]()
	}
	js.closers = nil
}

// begin writes the stream's headers.
func (js *jobStream) begin() {
	js.rc = http.NewResponseController(js.w)
	js.out = &deadlineWriter{w: js.w, rc: js.rc, d: js.s.cfg.StreamWriteTimeout}
	h := js.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	js.w.WriteHeader(http.StatusOK)
}

// sendStatus sends the job's status when it differs from the last sent;
// an error (a revoked key, a job gone, a write that failed) ends the
// stream.
func (js *jobStream) sendStatus() error {
	if js.s.keyRevoked(js.ctx, js.r) {
		return errKeyRevoked
	}
	sctx, cancel := js.s.timeout(js.ctx)
	st, err := jobs.Status(sctx, js.s.deps.Topo, js.tenant, js.id)
	cancel()
	if err != nil {
		return err
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if bytes.Equal(b, js.last) {
		return nil
	}
	js.last = b
	return event(js.out, "status", b)
}

// onStatus handles a status watch update (ok false: the watch ended) and
// reports whether the stream goes on.
func (js *jobStream) onStatus(e jetstream.KeyValueEntry, ok bool) bool {
	switch {
	case !ok:
		return false
	case e == nil:
		return true
	case e.Operation() != jetstream.KeyValuePut:
		return !js.purged()
	}
	js.suspect = false
	return js.sendStatus() == nil
}

// purged is called when the job's report or status is deleted: it reports
// whether the job itself is gone (purged by retention or maker jobs
// purge). While it is not, later pings check again: the record is
// purged last.
func (js *jobStream) purged() bool {
	js.suspect = true
	gctx, cancel := js.s.timeout(js.ctx)
	defer cancel()
	_, _, err := jobs.Get(gctx, js.s.deps.Topo, js.tenant, js.id)
	return errors.Is(err, jobs.ErrNotFound)
}

// heartbeat sends a ping and reports whether the stream goes on: not
// when the key is revoked, the job purged, or the write fails.
func (js *jobStream) heartbeat() bool {
	if js.s.keyRevoked(js.ctx, js.r) {
		return false
	}
	if js.suspect && js.purged() {
		return false
	}
	if _, err := js.out.Write([]byte(": ping\n\n")); err != nil {
		return false
	}
	return js.rc.Flush() == nil
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
