package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Check is one readiness condition: nil when the dependency it names is
// reachable.
type Check struct {
	// Name says what is checked ("nats", "redis", "topology"), in the
	// 503's text.
	Name string
	// Fn checks it; it should return well within a second.
	Fn func(ctx context.Context) error
}

// checkTimeout bounds one /readyz.
const checkTimeout = 2 * time.Second

// Server serves a role's /metrics, /healthz and /readyz.
type Server struct {
	url  string
	hs   *http.Server
	done chan error
	once sync.Once
}

// Start listens on addr (HOST:PORT; port 0 picks a free one) and serves
// reg's metrics at /metrics, "ok" at /healthz while the process runs, and
// at /readyz "ok" when every check passes, else 503 with the failing
// checks' reasons. It returns once listening; the server runs until ctx
// ends or Close.
func Start(ctx context.Context, addr string, reg *Registry, log *slog.Logger, checks ...Check) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", reg.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		cctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if why := Ready(cctx, checks...); why != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(why + "\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	s := &Server{
		url:  "http://" + ln.Addr().String() + "/metrics",
		done: make(chan error, 1),
		hs: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
	}
	go func() { // owned: ends when hs is closed (Close, or ctx below)
		err := s.hs.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	context.AfterFunc(ctx, func() { _ = s.Close() })
	return s, nil
}

// URL is the bound /metrics URL, http://HOST:PORT/metrics.
func (s *Server) URL() string { return s.url }

// BaseURL is http://HOST:PORT.
func (s *Server) BaseURL() string { return strings.TrimSuffix(s.url, "/metrics") }

// Close stops the server (a scrape in progress gets a second) and waits
// for it.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if serr := s.hs.Shutdown(ctx); serr != nil {
			_ = s.hs.Close()
		}
		err = <-s.done
	})
	return err
}

// Ready runs checks and returns "" when all pass, else one line per
// failing check: "name: reason".
func Ready(ctx context.Context, checks ...Check) string {
	var out []string
	for _, c := range checks {
		if err := c.Fn(ctx); err != nil {
			out = append(out, c.Name+": "+err.Error())
		}
	}
	return strings.Join(out, "\n")
}
