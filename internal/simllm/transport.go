package simllm

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// Transport returns an http.RoundTripper that hands requests straight to
// the server, in memory: for a fleet inside one process, where the model is
// the simulated one and a socket between two goroutines would only add
// cost. Requests go through the same handler as over HTTP.
func (s *Server) Transport() http.RoundTripper { return memTransport{s} }

type memTransport struct{ h http.Handler }

func (t memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil {
		req.Body = http.NoBody
	}
	defer req.Body.Close()
	w := &memResponse{header: http.Header{}}
	t.h.ServeHTTP(w, req)
	if err := req.Context().Err(); err != nil {
		return nil, err // the caller gave up: as a client whose connection was cut
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.header,
		Body:          io.NopCloser(&w.body),
		ContentLength: int64(w.body.Len()),
		Request:       req,
	}, nil
}

// memResponse is the http.ResponseWriter of an in-memory round trip.
type memResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *memResponse) Header() http.Header { return w.header }

func (w *memResponse) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *memResponse) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}
