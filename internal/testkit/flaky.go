package testkit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// Flaky is a model server endpoint in front of another (a simulated
// model) that can go down: while Down is set, or once it has had
// DownAfter calls (0: never), it answers every request 503, as a
// provider's deployment in an outage does.
type Flaky struct {
	Down      atomic.Bool
	DownAfter atomic.Int64
	// Calls counts every request; Refused those answered 503.
	Calls, Refused atomic.Int64
	srv            *httptest.Server
}

// StartFlaky starts a Flaky in front of target, an OpenAI-compatible
// base URL ending in /v1 or not; it stops at the test's end.
func StartFlaky(tb testing.TB, target string) *Flaky {
	tb.Helper()
	u, err := url.Parse(strings.TrimSuffix(target, "/v1"))
	if err != nil {
		tb.Fatal(err)
	}
	f := &Flaky{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := f.Calls.Add(1)
		if after := f.DownAfter.Load(); f.Down.Load() || (after > 0 && n > after) {
			f.Refused.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"deployment down (testkit.Flaky)","type":"server_error"}}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	tb.Cleanup(f.srv.Close)
	return f
}

// URL is its base URL, with /v1.
func (f *Flaky) URL() string { return f.srv.URL + "/v1" }
