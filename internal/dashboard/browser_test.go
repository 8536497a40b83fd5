package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/makerfleet/makerfleet/coordinator"
	"github.com/makerfleet/makerfleet/internal/api"
	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/internal/app/fleettest"
	"github.com/makerfleet/makerfleet/internal/batch"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/dashboard"
	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/simllm"
	"github.com/makerfleet/makerfleet/internal/taskreg"
	"github.com/makerfleet/makerfleet/schemas"
	taskspec "github.com/makerfleet/makerfleet/task/spec"
	"github.com/makerfleet/makerfleet/voter"
)

// chromium is the browser's path. Without one the test skips, unless
// MAKER_REQUIRE_CHROMIUM=1 (CI), where that is a failure.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("MAKER_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("no chromium found (apt-get install chromium chromium-driver), and MAKER_REQUIRE_CHROMIUM=1")
	}
	t.Skip("no chromium found: install the Debian packages chromium and chromium-driver (MAKER_REQUIRE_CHROMIUM=1 makes this a failure)")
	return ""
}

// artifactDir is where the test keeps its screenshot: $MAKER_ARTIFACTS_DIR
// if set, else the test's temporary directory.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MAKER_ARTIFACTS_DIR")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// dashEnv is the API server with the dashboard (and batches) on a fleet
// running a coordinator and a voter on the simulated model, a key of
// tenant alpha and an admin key (tenant ops).
type dashEnv struct {
	t     *testing.T
	fleet *fleettest.Env
	url   string
	key   string
	admin string
}

func newDashEnv(t *testing.T) *dashEnv {
	t.Helper()
	f := fleettest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	keys := apikey.New(f.Topo)
	if err := keys.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(keys.Stop)
	key, _, err := keys.Create(ctx, apikey.CreateOptions{Tenant: "alpha", Name: "dashboard test"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _, err := keys.Create(ctx, apikey.CreateOptions{Tenant: "ops", Admin: true, Name: "dashboard admin"})
	if err != nil {
		t.Fatal(err)
	}
	batches := batch.NewStore(f.Topo, taskreg.New(f.Topo.Tasks, f.Tasks, taskspec.CompileSpec))
	srv, err := api.New(api.Deps{NC: f.NC, Topo: f.Topo, Tasks: f.Tasks, Auth: keys, Batches: batches}, api.Config{Logger: f.Log})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(dashboard.Wrap(srv))
	t.Cleanup(func() {
		srv.CloseStreams()
		hs.Close()
	})
	// A little latency per sample: the job runs for a while. Some wrong
	// and some malformed or overlong answers: the plots and the red-flag
	// panel have something to show.
	sim := fleettest.StartSim(t, simllm.Config{Accuracy: 0.9, MalformedRate: 0.05, OverlongRate: 0.02, Seed: 3,
		Latency: 2 * time.Millisecond})
	f.StartCoordinator(coordinator.Config{})
	f.StartVoter(fleettest.SimClient(t, sim, llm.Config{}), voter.Config{Concurrency: 8})
	return &dashEnv{t: t, fleet: f, url: hs.URL, key: key, admin: admin}
}

// post sends a JSON body (nil: none) with the key and decodes the 2xx
// answer into out.
func (e *dashEnv) post(path string, body, out any) {
	e.t.Helper()
	e.send(http.MethodPost, path, e.key, body, out)
}

// send sends a request with key, a JSON body (nil: none, []byte: as it
// is, as JSON Lines) and decodes the 2xx answer into out (nil: none).
func (e *dashEnv) send(method, path, key string, body, out any) {
	e.t.Helper()
	var rd *bytes.Reader
	ct := "application/json"
	if raw, ok := body.([]byte); ok {
		rd, ct = bytes.NewReader(raw), "application/jsonl"
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		e.t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
	}
	if out == nil {
		return
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
}

// waitStatus follows the job's status until ok holds and returns it.
func (e *dashEnv) waitStatus(ctx context.Context, id string, ok func(schemas.JobStatus) bool) schemas.JobStatus {
	e.t.Helper()
	w, err := e.fleet.Topo.Status.Watch(ctx, bus.JobKey("alpha", id))
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			e.t.Fatalf("job %s: the status looked for never came", id)
		case u := <-w.Updates():
			if u == nil || u.Operation() != jetstream.KeyValuePut {
				continue
			}
			var st schemas.JobStatus
			if schemas.Decode(u.Value(), &st) == nil && ok(st) {
				return st
			}
		}
	}
}

// TestDashboardInBrowser opens the dashboard in a real headless Chromium:
// the key is entered once, the jobs list shows the job, its page shows the
// paused job's progress and plots, the page's resume button lets it run
// on, and the progress shown moves with it, live over the step stream. A
// full-page screenshot is kept as the test's artifact.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	e := newDashEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A long job (4,095 steps), paused by the test after a few steps: the
	// page is opened on a job that waits, and its progress moves when the
	// page resumes it.
	var created schemas.JobCreated
	e.post("/v1/jobs", schemas.JobRequest{
		Task: "hanoi", Params: json.RawMessage(`{"disks":12}`), K: 2, Seed: 7,
		Pricing: &schemas.Pricing{InputUSDPerMTok: 1, OutputUSDPerMTok: 2},
	}, &created)
	id := created.ID
	e.waitStatus(ctx, id, func(st schemas.JobStatus) bool { return st.Steps >= 5 })
	e.post("/v1/jobs/"+id+"/pause", nil, &schemas.ControlResult{})
	paused := e.waitStatus(ctx, id, func(st schemas.JobStatus) bool { return st.State == schemas.StatePaused })
	t.Logf("job %s paused at step %d of %d", id, paused.Steps, paused.TotalSteps)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1280, 1600),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	// The first run starts the browser: no timeout on its context.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// Every later action is bounded by the test's deadline.
	run, rcancel := context.WithDeadline(bctx, deadline(ctx))
	defer rcancel()
	wait := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(run, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond),
			chromedp.WithPollingTimeout(time.Until(deadline(ctx))))); err != nil {
			t.Fatalf("waiting for %s (%s): %v", what, expr, err)
		}
	}
	num := func(expr string) int64 {
		t.Helper()
		n, err := chromedp.Run(run, chromedp.Evaluate[int64](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return n
	}

	// / redirects to the dashboard, which asks for the key.
	if err := chromedp.Do(run,
		chromedp.Navigate(e.url+"/"),
		chromedp.WaitVisible(chromedp.ID("key-input")),
		chromedp.SendKeys(chromedp.ID("key-input"), e.key),
		chromedp.Click(chromedp.ID("key-submit")),
		chromedp.WaitVisible(chromedp.CSS(`#jobs-table a[href="#/jobs/`+id+`"]`)),
	); err != nil {
		t.Fatalf("log in and list jobs: %v", err)
	}
	if loc := num(`location.href.includes(` + jsString(e.key) + `) ? 1 : 0`); loc != 0 {
		t.Fatal("the key is in the page's URL")
	}
	if got := num(`sessionStorage.getItem("makerfleet.apiKey") === ` + jsString(e.key) + ` ? 1 : 0`); got != 1 {
		t.Fatal("the key is not kept in sessionStorage")
	}

	// The job's page shows the paused job: its steps, and a point per
	// decided step in the plots.
	if err := chromedp.Do(run,
		chromedp.Click(chromedp.CSS(`#jobs-table a[href="#/jobs/`+id+`"]`)),
		chromedp.WaitVisible(chromedp.ID("panel-progress")),
	); err != nil {
		t.Fatalf("open the job's page: %v", err)
	}
	s1 := paused.Steps
	wait("the paused job's progress", fmt.Sprintf(`document.getElementById("progress-text").dataset.steps === "%d" && `+
		`document.getElementById("job-state").textContent === "paused" && `+
		`Number(document.getElementById("chart-samples").dataset.points) === %d && `+
		`Number(document.getElementById("chart-margin").dataset.points) >= 1`, s1, s1))

	// Resume from the page: the progress shown moves on, live.
	if err := chromedp.Do(run, chromedp.Click(chromedp.ID("btn-resume"))); err != nil {
		t.Fatalf("resume: %v", err)
	}
	s2 := s1 + 20
	wait("the progress to move", fmt.Sprintf(`Number(document.getElementById("progress-text").dataset.steps) >= %d && `+
		`Number(document.getElementById("chart-samples").dataset.points) >= %d && `+
		`Number(document.getElementById("chart-cost").dataset.points) >= 2`, s2, s2))
	shown := num(`Number(document.getElementById("progress-text").dataset.steps)`)
	phatSteps := num(`Number(document.getElementById("phat").dataset.steps)`)
	phat, err := chromedp.Run(run, chromedp.Text(chromedp.ID("phat")))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the page shows step %d (was %d when paused); p̂ %s over %d steps", shown, s1, phat, phatSteps)
	if phatSteps < s2 || !strings.HasPrefix(phat, "0.") && phat != "1.0000" {
		t.Errorf("p̂ %q over %d steps, want a share over >= %d steps", phat, phatSteps, s2)
	}

	png, err := chromedp.Run(run, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(artifactDir(t), "dashboard-job.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the job's page (%d bytes): %s", len(png), path)

	// Stop the job: the fleet has nothing left to do when the test ends.
	// The page then says why it ended, as its report does.
	e.post("/v1/jobs/"+id+"/cancel", nil, &schemas.ControlResult{})
	wait("the reason the job ended", `document.getElementById("job-state").textContent === "cancelled" && `+
		`document.getElementById("job-reason").textContent.length > 1`)
	reason, err := chromedp.Run(run, chromedp.Text(chromedp.ID("job-reason")))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the page says the job ended: %s", reason)
}

// deadline is ctx's deadline.
func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
