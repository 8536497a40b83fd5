package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/schemas"
)

var listeningRE = regexp.MustCompile(`maker serve listening on (http://\S+)`)

// TestServe runs maker serve as main does: it binds the fleet, answers
// keyed requests for the key's tenant, and stops cleanly on its signal.
func TestServe(t *testing.T) {
	t.Parallel()
	env := fleettest.New(t)
	key, _, err := apikey.New(env.Topo).Create(t.Context(), apikey.CreateOptions{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"serve", "--nats", env.NATS.URL, "--redis", env.Redis().URL(), "--addr", "127.0.0.1:0"}, &out, &errb)
	}()
	var base string
	fleettest.Eventually(t, 30*time.Second, func() bool {
		select {
		case c := <-code:
			t.Fatalf("serve exited %d: %s", c, errb.String())
		default:
		}
		m := listeningRE.FindStringSubmatch(errb.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, "serve never listened: %s", errb.String())

	do := func(method, path, key, body string) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if c, _ := do("GET", "/healthz", "", ""); c != http.StatusOK {
		t.Errorf("healthz: %d", c)
	}
	// The dashboard's URL is printed at start; its page needs no key.
	if want := "dashboard: " + base + "/dashboard/\n"; !strings.Contains(errb.String(), want) {
		t.Errorf("stderr does not print %q: %s", want, errb.String())
	}
	if c, b := do("GET", "/dashboard/", "", ""); c != http.StatusOK || !strings.Contains(string(b), "app.js") {
		t.Errorf("dashboard: %d %.200s", c, b)
	}
	if c, b := do("GET", "/v1/jobs", "mk_000000000000_"+strings.Repeat("x", 43), ""); c != http.StatusUnauthorized {
		t.Errorf("unknown key: %d %s", c, b)
	}
	c, b := do("POST", "/v1/jobs", key, `{"task":"hanoi","params":{"disks":3},"k":2,"seed":1}`)
	var created schemas.JobCreated
	if c != http.StatusCreated || json.Unmarshal(b, &created) != nil || created.Tenant != "acme" {
		t.Fatalf("submit: %d %s", c, b)
	}
	if c, b := do("GET", "/v1/jobs/"+created.ID, key, ""); c != http.StatusOK || !strings.Contains(string(b), `"tenant":"acme"`) {
		t.Errorf("get: %d %s", c, b)
	}
	cancel()
	select {
	case c := <-code:
		if c != ExitOK {
			t.Errorf("serve stopped with exit %d: %s", c, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// TestServeUsage: bad flags exit with the usage code before anything
// starts.
func TestServeUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--tls-cert", "c.pem"},
		{"serve", "--rate", "-1"},
		{"serve", "--redis", "nope://x"},
	} {
		if res := runMain(t, args...); res.code != ExitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, res.code, res.stderr, ExitUsage)
		}
	}
}
