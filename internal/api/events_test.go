package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/testkit"
	"github.com/makerfleet/makerfleet/schemas"
)

// sse is one event of a stream: its name and data, or a comment.
type sse struct {
	name, data, comment string
}

// stream opens path's event stream with key and sends its events on the
// channel, closed when the stream ends.
func (e *apiEnv) stream(ctx context.Context, path, key string) <-chan sse {
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
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		e.t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sse)
	go func() { // ends with the stream (the server's end, or ctx)
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var ev sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sse{}) {
					select {
					case out <- ev:
					case <-ctx.Done():
						return
					}
				}
				ev = sse{}
			case strings.HasPrefix(line, ":"):
				ev.comment = strings.TrimSpace(line[1:])
			case strings.HasPrefix(line, "event: "):
				ev.name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			}
		}
	}()
	return out
}

// TestJobLifecycle runs jobs through the API on a fleet: the event stream
// sends status events, then the report, then ends; the result is the
// report; a running job is cancelled through the API; answers validate
// against the OpenAPI document.
func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{run: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	created := e.json(http.MethodPost, "/v1/jobs", e.key[alpha], hanoi(3))
	checkBody(t, "JobCreated", created.body)
	var c schemas.JobCreated
	created.decode(t, http.StatusCreated, &c)
	var statuses int
	var report []byte
	for ev := range e.stream(ctx, "/v1/jobs/"+c.ID+"/events", e.key[alpha]) {
		switch ev.name {
		case "status":
			var st schemas.JobStatus
			if err := schemas.Decode([]byte(ev.data), &st); err != nil || st.JobID != c.ID || st.Tenant != alpha {
				t.Fatalf("status event %s: %v", ev.data, err)
			}
			checkBody(t, "JobStatus", []byte(ev.data))
			statuses++
		case "report":
			if report != nil {
				t.Fatal("two report events")
			}
			report = []byte(ev.data)
		default:
			t.Fatalf("event %+v", ev)
		}
	}
	if statuses == 0 || report == nil {
		t.Fatalf("stream ended with %d status events, report %s", statuses, report)
	}
	var rep schemas.JobReport
	if err := schemas.Decode(report, &rep); err != nil || rep.State != schemas.StateSolved || rep.JobID != c.ID {
		t.Fatalf("report %s: %v", report, err)
	}
	res := e.json(http.MethodGet, "/v1/jobs/"+c.ID+"/result", e.key[alpha], nil)
	checkBody(t, "JobReport", res.body)
	var got schemas.JobReport
	res.decode(t, http.StatusOK, &got)
	if got.TraceSHA256 != rep.TraceSHA256 || got.Steps != 7 {
		t.Errorf("result %+v, want the streamed report", got)
	}
	// The coordinator stores the report, then marks the registry record
	// finished: the view may trail the report event by that one write.
	var v schemas.JobView
	testkit.Eventually(t, 10*time.Second, func() bool {
		view := e.json(http.MethodGet, "/v1/jobs/"+c.ID, e.key[alpha], nil)
		checkBody(t, "JobView", view.body)
		v = schemas.JobView{}
		view.decode(t, http.StatusOK, &v)
		return v.Finished
	}, "the job's record never finished")
	if v.State != schemas.StateSolved || !v.Finished || v.Progress != 1 || v.Steps != 7 || v.TotalSteps != 7 {
		t.Errorf("view %+v", v)
	}
	// A finished job's stream sends its status and report at once.
	var names []string
	for ev := range e.stream(ctx, "/v1/jobs/"+c.ID+"/events", e.key[alpha]) {
		names = append(names, ev.name)
	}
	if strings.Join(names, ",") != "status,report" {
		t.Errorf("a finished job's stream: %v", names)
	}
	// A finished job cannot be paused.
	e.json(http.MethodPost, "/v1/jobs/"+c.ID+"/pause", e.key[alpha], nil).problem(t, http.StatusConflict, api.TypeFinished)

	// A long job, cancelled once it runs.
	long := e.submit(alpha, hanoi(14))
	sent := false
	var final schemas.JobReport
	for ev := range e.stream(ctx, "/v1/jobs/"+long.ID+"/events", e.key[alpha]) {
		var st schemas.JobStatus
		if ev.name == "status" && json.Unmarshal([]byte(ev.data), &st) == nil && st.State == schemas.StateRunning && st.Steps > 0 && !sent {
			r := e.json(http.MethodPost, "/v1/jobs/"+long.ID+"/cancel", e.key[alpha], nil)
			checkBody(t, "ControlResult", r.body)
			var cr schemas.ControlResult
			r.decode(t, http.StatusOK, &cr)
			if cr.Control != schemas.ControlCancel || !cr.Changed {
				t.Errorf("cancel: %+v", cr)
			}
			sent = true
		}
		if ev.name == "report" {
			if err := json.Unmarshal([]byte(ev.data), &final); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !sent || final.State != schemas.StateCancelled {
		t.Errorf("cancel sent %v, final state %q", sent, final.State)
	}
}

// TestEventsHeartbeat: a stream of a job that does not change sends pings;
// the server's CloseStreams ends it.
func TestEventsHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{cfg: api.Config{Heartbeat: 5 * time.Millisecond}})
	c := e.submit(beta, hanoi(3)) // no coordinator: it stays queued
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := e.stream(ctx, "/v1/jobs/"+c.ID+"/events", e.key[beta])
	first := <-events
	var st schemas.JobStatus
	if first.name != "status" || json.Unmarshal([]byte(first.data), &st) != nil || st.State != schemas.StateQueued {
		t.Fatalf("first event %+v", first)
	}
	pings := 0
	for ev := range events {
		if ev.comment == "ping" {
			pings++
		}
		if pings == 2 {
			e.srv.CloseStreams()
		}
	}
	if pings < 2 {
		t.Errorf("%d pings", pings)
	}
	// 409 not-finished names the state.
	p := e.json(http.MethodGet, "/v1/jobs/"+c.ID+"/result", e.key[beta], nil).problem(t, http.StatusConflict, api.TypeNotFinished)
	if p.State != schemas.StateQueued {
		t.Errorf("not-finished state %q", p.State)
	}
}

// TestControlWithoutCoordinator: with no coordinator running, pause,
// resume and cancel write the registry with the same checks.
func TestControlWithoutCoordinator(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	c := e.submit(alpha, hanoi(3))
	for _, step := range []struct {
		action, control string
		changed         bool
	}{
		{"pause", schemas.ControlPause, true}, {"pause", schemas.ControlPause, false},
		{"resume", schemas.ControlRun, true}, {"cancel", schemas.ControlCancel, true},
	} {
		var cr schemas.ControlResult
		e.json(http.MethodPost, "/v1/jobs/"+c.ID+"/"+step.action, e.key[alpha], nil).decode(t, http.StatusOK, &cr)
		if cr.Control != step.control || cr.Changed != step.changed || cr.ID != c.ID || cr.Tenant != alpha {
			t.Errorf("%s: %+v, want control %s changed %v", step.action, cr, step.control, step.changed)
		}
	}
	// A decision for a step that waits for no person.
	if r := e.json(http.MethodPost, "/v1/jobs/"+c.ID+"/decide", e.key[alice], `{"step":0,"answer":"x"}`); r.status != http.StatusConflict {
		t.Errorf("decide a step that waits for no one: %d %s", r.status, r.body)
	}
}
