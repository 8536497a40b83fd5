package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/makerfleet/makerfleet/schemas"
)

// maxEventBytes bounds one event (a report with a large final state).
const maxEventBytes = 16 << 20

// Event names of a job's event stream.
const (
	EventStatus = "status"
	EventReport = "report"
)

// Event is one Server-Sent Event of a job's stream: a status (Status
// set) or, last, the report (Report set). Data is the event's data as
// sent; an event of another name has only Name and Data.
type Event struct {
	Name   string
	Data   json.RawMessage
	Status *schemas.JobStatus
	Report *schemas.JobReport
}

// EventStream reads a job's events. Close it when done (ending ctx ends
// it too).
type EventStream struct {
	body io.Closer
	r    *eventReader
}

// Events opens the job's event stream: its status now and on every
// change, then its report once it finishes, and the stream ends.
func (c *Client) Events(ctx context.Context, id string) (*EventStream, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/events", nil, nil, "")
	if err != nil {
		return nil, err
	}
	return &EventStream{body: resp.Body, r: newEventReader(resp.Body)}, nil
}

// Next returns the next event; io.EOF once the stream has ended.
func (s *EventStream) Next() (Event, error) {
	name, data, err := s.r.next()
	if err != nil {
		return Event{}, err
	}
	ev := Event{Name: name, Data: data}
	switch name {
	case EventStatus:
		ev.Status = new(schemas.JobStatus)
		err = json.Unmarshal(data, ev.Status)
	case EventReport:
		ev.Report = new(schemas.JobReport)
		err = json.Unmarshal(data, ev.Report)
	}
	if err != nil {
		return Event{}, fmt.Errorf("httpapi: %s event: %w", name, err)
	}
	return ev, nil
}

// Close ends the stream.
func (s *EventStream) Close() error { return s.body.Close() }

// Wait follows the job's event stream until its report and returns it;
// onStatus, if not nil, receives each status meanwhile (from the calling
// goroutine). A stream that ends without a report (the server stopped)
// is ErrUnavailable: Wait again, or read the Result.
func (c *Client) Wait(ctx context.Context, id string, onStatus func(schemas.JobStatus)) (schemas.JobReport, error) {
	s, err := c.Events(ctx, id)
	if err != nil {
		return schemas.JobReport{}, err
	}
	defer func() { _ = s.Close() }()
	for {
		ev, err := s.Next()
		switch {
		case errors.Is(err, io.EOF):
			return schemas.JobReport{}, fmt.Errorf("%w: the event stream of %s ended without a report", ErrUnavailable, id)
		case err != nil:
			if ctx.Err() != nil {
				return schemas.JobReport{}, ctx.Err()
			}
			return schemas.JobReport{}, err
		case ev.Report != nil:
			return *ev.Report, nil
		case ev.Status != nil && onStatus != nil:
			onStatus(*ev.Status)
		}
	}
}

// eventReader parses text/event-stream: "event:" and "data:" fields (data
// lines joined with newlines), comments (":") and other fields skipped, an
// event dispatched at a blank line; an event with no data is skipped.
type eventReader struct {
	sc *bufio.Scanner
}

func newEventReader(r io.Reader) *eventReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEventBytes)
	sc.Split(new(lineSplitter).split)
	return &eventReader{sc: sc}
}

func (r *eventReader) next() (name string, data []byte, err error) {
	var buf bytes.Buffer
	hasData := false
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if len(line) == 0 {
			if hasData {
				if name == "" {
					name = "message"
				}
				return name, buf.Bytes(), nil
			}
			name = ""
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if hasData {
				buf.WriteByte('\n')
			}
			buf.Write(value)
			hasData = true
		}
	}
	if err := r.sc.Err(); err != nil {
		return "", nil, fmt.Errorf("httpapi: read events: %w", err)
	}
	return "", nil, io.EOF
}

// lineSplitter splits at "\n", "\r\n" or "\r", as the SSE format allows.
// bufio.Scanner hands the same unfinished line again after each read,
// grown by what was read; searched is how much of it is known to hold no
// line break, so each byte is searched once (searching from the start
// every time made a large event cost time quadratic in its size).
type lineSplitter struct {
	searched int
}

func (l *lineSplitter) split(data []byte, atEOF bool) (int, []byte, error) {
	from := min(l.searched, len(data))
	i := bytes.IndexAny(data[from:], "\r\n")
	if i < 0 {
		if atEOF && len(data) > 0 {
			l.searched = 0
			return len(data), data, nil
		}
		l.searched = len(data)
		return 0, nil, nil
	}
	i += from
	switch {
	case data[i] == '\n':
		l.searched = 0
		return i + 1, data[:i], nil
	case i+1 < len(data):
		l.searched = 0
		if data[i+1] == '\n' {
			return i + 2, data[:i], nil
		}
		return i + 1, data[:i], nil
	case atEOF:
		l.searched = 0
		return i + 1, data[:i], nil
	}
	l.searched = i // a "\n" may follow the "\r"
	return 0, nil, nil
}
