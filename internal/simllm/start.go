package simllm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Running is a Server listening on a TCP address. It owns its serving
// goroutine; Close stops it.
type Running struct {
	srv  *Server
	ln   net.Listener
	http *http.Server
	done chan struct{} // closed when Serve has returned
	err  error         // Serve's error, other than ErrServerClosed; read after done

	closeOnce sync.Once
	closeErr  error
}

// Start validates cfg, listens on addr (e.g. "127.0.0.1:0" for a free port)
// and serves in the background until Close. ctx bounds only the listen.
func Start(ctx context.Context, addr string, cfg Config) (*Running, error) {
	srv, err := New(cfg)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("simllm: listen on %s: %w", addr, err)
	}
	rn := &Running{
		srv:  srv,
		ln:   ln,
		done: make(chan struct{}),
		http: &http.Server{
			Handler:           srv,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
		},
	}
	go func() {
		defer close(rn.done)
		if err := rn.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			rn.err = err
		}
	}()
	return rn, nil
}

// URL is the API base URL including /v1, e.g. "http://127.0.0.1:1234/v1".
func (rn *Running) URL() string { return "http://" + rn.ln.Addr().String() + "/v1" }

// Addr is the listening address, host:port.
func (rn *Running) Addr() string { return rn.ln.Addr().String() }

// Server is the handler being served.
func (rn *Running) Server() *Server { return rn.srv }

// Stats returns the server's counters.
func (rn *Running) Stats() Stats { return rn.srv.Stats() }

// Close shuts down gracefully: it stops accepting, lets in-flight requests
// finish until ctx ends, then closes the remaining connections. It waits for
// the serving goroutine. Later calls return the first call's result.
func (rn *Running) Close(ctx context.Context) error {
	rn.closeOnce.Do(func() {
		err := rn.http.Shutdown(ctx)
		if err != nil {
			err = errors.Join(err, rn.http.Close())
		}
		<-rn.done
		rn.closeErr = errors.Join(err, rn.err)
	})
	return rn.closeErr
}
