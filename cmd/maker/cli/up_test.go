package cli

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestUp: maker up brings a whole local fleet up: it prints the URLs and
// an API key, its demo job is solved (counted on /metrics), the dashboard
// and the API answer on the printed address with the printed key, and
// Ctrl-C stops it all with exit 0.
func TestUp(t *testing.T) {
	t.Parallel()
	base, stderr, stop := startService(t, "up", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
		"--demo-disks", "4", "--sim-latency", "1ms", "--tenant", "acme")
	api := regexp.MustCompile(`(?m)^maker serve listening on (http://127\.0\.0\.1:\d+)$`)
	keyRE := regexp.MustCompile(`API key \(tenant acme, admin\): (mk_\S+)`)
	testkit.Eventually(t, 60*time.Second, func() bool { return api.MatchString(stderr.String()) },
		"no API line in %s", stderr)
	out := stderr.String()
	apiURL := api.FindStringSubmatch(out)[1]
	m := keyRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no API key printed: %s", out)
	}
	for _, want := range []string{"NATS:    nats://", "dashboard: " + apiURL + "/dashboard/"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q: %s", want, out)
		}
	}
	// The 4-disk demo job has 15 steps.
	testkit.Eventually(t, 60*time.Second, func() bool {
		_, body := httpGet(t, base+"/metrics")
		return strings.Contains(body, `maker_jobs_finished_total{state="solved",tenant="acme"} 1`)
	}, "the demo job was never solved")
	_, body := httpGet(t, base+"/metrics")
	for _, want := range []string{`maker_decisions_total{rung="own_model",tenant="acme"} 15`, `maker_build_info{role="up"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, _ := httpGet(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz %d", code)
	}
	if code, page := httpGet(t, apiURL+"/dashboard/"); code != 200 || !strings.Contains(page, "<html") {
		t.Errorf("dashboard: %d %.80q", code, page)
	}
	req, _ := http.NewRequest(http.MethodGet, apiURL+"/v1/jobs", nil)
	req.Header.Set("Authorization", "Bearer "+m[1])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /v1/jobs with the printed key: %d", resp.StatusCode)
	}
	if code := stop(); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// TestUpRefusesBadFlags: bad numbers are usage errors before anything
// starts.
func TestUpRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"up", "--voters", "0"},
		{"up", "--demo-disks", "21"},
		{"up", "--tenant", "Bad Tenant!"},
		{"up", "--addr", "127.0.0.1:99999"},
	} {
		var out, errOut syncBuffer
		if code := Main(t.Context(), args, &out, &errOut); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d: %s", args, code, ExitUsage, errOut.String())
		}
	}
}
