package metrics

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTP holds an HTTP API's metrics. A nil *HTTP is valid: Middleware
// returns the handler as it is.
type HTTP struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewHTTP makes the HTTP metrics on r.
func NewHTTP(r *Registry) *HTTP {
	h := &HTTP{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "maker_http_requests_total",
			Help: "HTTP requests answered, by route pattern and status code."}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "maker_http_request_duration_seconds",
			Help: "HTTP requests' duration by route pattern (an event stream's whole life).", Buckets: httpBuckets}, []string{"route"}),
	}
	r.register(h.requests, h.duration)
	return h
}

// Middleware counts next's requests. The route label is the pattern of
// the http.ServeMux that served the request (Request.Pattern, set on the
// request by the innermost mux), never the raw path; "unmatched" when no
// mux set one.
func (h *HTTP) Middleware(next http.Handler) http.Handler {
	if h == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		code := sw.status
		if code == 0 {
			code = http.StatusOK
		}
		h.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		h.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// statusWriter notes the status written. It unwraps (for
// http.ResponseController) and flushes (event streams).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if hj, ok := w.ResponseWriter.(http.Hijacker); ok {
		return hj.Hijack()
	}
	return nil, nil, errors.New("metrics: the response writer cannot hijack")
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
