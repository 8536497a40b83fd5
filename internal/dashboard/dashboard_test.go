package dashboard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/dashboard"
)

// TestWrap: the dashboard's assets are served under /dashboard/ without a
// key, with a strict content security policy; / redirects there; every
// other request goes to the API.
func TestWrap(t *testing.T) {
	t.Parallel()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-API", "yes")
		w.WriteHeader(http.StatusUnauthorized)
	})
	srv := httptest.NewServer(dashboard.Wrap(api))
	t.Cleanup(srv.Close)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		method, path string
		status       int
		// typ is the Content-Type's start, body a string the body holds,
		// location the redirect's target.
		typ, body, location string
		api                 bool
	}{
		{"GET", "/", http.StatusFound, "", "", "/dashboard/", false},
		{"GET", "/dashboard", http.StatusTemporaryRedirect, "", "", "/dashboard/", false},
		{"GET", "/dashboard/", http.StatusOK, "text/html", `<script src="app.js" defer></script>`, "", false},
		{"GET", "/dashboard/app.js", http.StatusOK, "text/javascript", "readSSE", "", false},
		{"GET", "/dashboard/style.css", http.StatusOK, "text/css", ".panel", "", false},
		{"HEAD", "/dashboard/app.js", http.StatusOK, "text/javascript", "", "", false},
		{"GET", "/dashboard/nope.js", http.StatusNotFound, "", "", "", false},
		{"POST", "/dashboard/", http.StatusMethodNotAllowed, "", "", "", false},
		{"POST", "/", http.StatusUnauthorized, "", "", "", true},
		{"GET", "/v1/jobs", http.StatusUnauthorized, "", "", "", true},
		{"GET", "/healthz", http.StatusUnauthorized, "", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if got := resp.Header.Get("X-API") == "yes"; got != tt.api {
				t.Errorf("answered by the API: %v, want %v", got, tt.api)
			}
			if tt.typ != "" && !strings.HasPrefix(resp.Header.Get("Content-Type"), tt.typ) {
				t.Errorf("Content-Type %q, want %s", resp.Header.Get("Content-Type"), tt.typ)
			}
			if !strings.Contains(string(b), tt.body) {
				t.Errorf("body does not hold %q", tt.body)
			}
			if tt.location != "" && resp.Header.Get("Location") != tt.location {
				t.Errorf("Location %q, want %q", resp.Header.Get("Location"), tt.location)
			}
			if resp.StatusCode == http.StatusOK {
				if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") ||
					!strings.Contains(csp, "connect-src 'self'") {
					t.Errorf("Content-Security-Policy %q", csp)
				}
			}
		})
	}
}
