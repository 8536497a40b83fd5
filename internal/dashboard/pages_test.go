package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// browser is a headless Chromium on the dashboard, its actions bounded by
// the test's deadline.
type browser struct {
	t   *testing.T
	run context.Context
	end time.Time
	dir string // where screenshots go
}

func openBrowser(t *testing.T, ctx context.Context, w, h int) *browser {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(w, h),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	run, rcancel := context.WithDeadline(bctx, deadline(ctx))
	t.Cleanup(rcancel)
	return &browser{t: t, run: run, end: deadline(ctx), dir: artifactDir(t)}
}

// do runs actions; what names them in a failure.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.run, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// wait waits until the JavaScript expression expr holds: the page's own
// events make it true, polled every 50 ms up to the test's deadline.
func (b *browser) wait(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.run, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond),
		chromedp.WithPollingTimeout(time.Until(b.end)))); err != nil {
		b.t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

func (b *browser) text(expr string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.run, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return s
}

// shot keeps a screenshot of the window as name in the artifacts.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.run, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// eval runs the JavaScript expression expr.
func (b *browser) eval(expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.run, chromedp.Evaluate[any](expr)); err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
}

// login forgets any key the tab holds and enters key.
func (b *browser) login(url, key string) {
	b.t.Helper()
	b.do("open the dashboard", chromedp.Navigate(url+"/dashboard/#/"))
	b.eval(`sessionStorage.clear()`)
	b.do("log in",
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.ID("key-input")),
		chromedp.SendKeys(chromedp.ID("key-input"), key),
		chromedp.Click(chromedp.ID("key-submit")),
		chromedp.WaitVisible(chromedp.ID("jobs-table")),
	)
	b.wait("whoami", `document.getElementById("who").textContent.startsWith("tenant ")`)
}

// hash opens the page at #hash.
func (b *browser) hash(h string) {
	b.t.Helper()
	b.eval(`location.hash = ` + jsString(h))
}

// TestDashboardPages visits every page of the dashboard in a real
// headless Chromium on a real fleet: the jobs list's state and task
// filters, a finished job's page (its reason, no control buttons, a cost
// and a k point for every step from the journal), a finished batch's
// counts and its output saved from a Blob, the dead letters (hidden from a
// tenant key; an admin key inspects one and replays it), and the fleet
// page (its voters, or "not available" where GET /v1/fleet answers 404).
// A screenshot of each page is kept as an artifact.
func TestDashboardPages(t *testing.T) {
	t.Parallel()
	e := newDashEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := openBrowser(t, ctx, 1100, 820)

	// A short job that finishes, and a long one paused: the list's filter
	// tells them apart.
	var done, long schemas.JobCreated
	e.post("/v1/jobs", schemas.JobRequest{Task: "hanoi", Params: json.RawMessage(`{"disks":4}`), K: 2, Seed: 7,
		Pricing: &schemas.Pricing{InputUSDPerMTok: 1, OutputUSDPerMTok: 2}}, &done)
	e.post("/v1/jobs", schemas.JobRequest{Task: "hanoi", Params: json.RawMessage(`{"disks":12}`), K: 2, Seed: 8}, &long)
	e.waitStatus(ctx, long.ID, func(st schemas.JobStatus) bool { return st.Steps >= 3 })
	e.post("/v1/jobs/"+long.ID+"/pause", nil, &schemas.ControlResult{})
	e.waitStatus(ctx, long.ID, func(st schemas.JobStatus) bool { return st.State == schemas.StatePaused })
	solved := e.waitStatus(ctx, done.ID, func(st schemas.JobStatus) bool { return st.State == schemas.StateSolved })

	// A batch of two lines and one invalid line.
	var bc schemas.BatchCreated
	e.send(http.MethodPost, "/v1/batches", e.key, []byte(`{"custom_id":"a","task":"hanoi","params":{"disks":2},"k":2}
{"custom_id":"b","task":"hanoi","params":{"disks":3},"k":2}
{"custom_id":"c","task":"no-such-task","params":{}}
`), &bc)

	// The tenant's key: jobs, no admin pages.
	b.login(e.url, e.key)
	row := func(id string) string { return `#jobs-table a[href="#/jobs/` + id + `"]` }
	b.do("the list", chromedp.WaitVisible(chromedp.CSS(row(done.ID))), chromedp.WaitVisible(chromedp.CSS(row(long.ID))))
	if got := b.text(`document.getElementById("nav-dlq").hidden + "," + document.getElementById("nav-fleet").hidden`); got != "true,true" {
		t.Errorf("a tenant key sees the admin pages' links (hidden: %s)", got)
	}
	// Filter by state: only the paused job.
	b.do("filter by state", chromedp.SetValue(chromedp.ID("f-state"), "paused"), chromedp.Click(chromedp.ID("f-apply")))
	b.wait("the paused job alone", fmt.Sprintf(`document.querySelectorAll("#jobs-table tbody tr").length === 1 && `+
		`!!document.querySelector(%s)`, jsString(row(long.ID))))
	if st := b.text(`document.querySelector("#jobs-table tbody td[data-state]").dataset.state`); st != "paused" {
		t.Errorf("the filtered row's state: %q", st)
	}
	b.shot("dashboard-jobs.png")
	// Filter by a task no job has: none.
	b.do("filter by task", chromedp.SetValue(chromedp.ID("f-state"), ""), chromedp.SetValue(chromedp.ID("f-task"), "multiply"),
		chromedp.Click(chromedp.ID("f-apply")))
	b.wait("no job of task multiply", `document.querySelectorAll("#jobs-table tbody tr").length === 0 && `+
		`document.getElementById("jobs-count").textContent.includes("match")`)
	b.hash("#/dlq")
	b.wait("the dead letters refused to a tenant key", `document.getElementById("dlq-error").textContent.includes("admin")`)

	// A finished job's page: why it ended, no control, every step's cost
	// and k from the journal.
	b.hash("#/jobs/" + done.ID)
	steps := solved.Steps
	b.wait("the finished job", fmt.Sprintf(`document.getElementById("job-state").textContent === "solved" && `+
		`Number(document.getElementById("chart-cost").dataset.points) === %d && `+
		`Number(document.getElementById("chart-k").dataset.points) === %d && `+
		`document.getElementById("stream-state").textContent.startsWith("ended")`, steps, steps))
	if r := b.text(`document.getElementById("job-reason").textContent`); r == "" || r == "–" {
		t.Errorf("the finished job's reason shows %q", r)
	}
	if btn := b.text(`["btn-pause","btn-resume","btn-cancel"].filter((id) => !document.getElementById(id).hidden).join(",")`); btn != "" {
		t.Errorf("a finished job's page offers %s", btn)
	}
	if k := b.text(`document.getElementById("job-k").textContent`); k != "2" {
		t.Errorf("the job's k shows %q, want 2", k)
	}
	b.wait("the job's speed and elapsed time", `document.getElementById("job-speed").textContent.endsWith("steps/s") && `+
		`document.getElementById("job-elapsed").textContent !== "–"`)
	b.shot("dashboard-job-finished.png")

	// The batch's page: its counts once it ends, and its output saved
	// from a Blob (the key never in a URL).
	b.hash("#/batches")
	b.do("the batches list", chromedp.WaitVisible(chromedp.CSS(`#batches-table a[href="#/batches/`+bc.ID+`"]`)))
	b.hash("#/batches/" + bc.ID)
	b.wait("the batch to complete", `document.getElementById("batch-state").textContent === "completed"`)
	count := func(name string) string {
		return b.text(`document.querySelector('#batch-counts tr[data-count="` + name + `"] td[data-n]').dataset.n`)
	}
	if c, f := count("completed"), count("invalid"); c != "2" || f != "1" {
		t.Errorf("the batch's page counts completed %s, invalid %s; want 2 and 1", c, f)
	}
	if !strings.EqualFold(b.text(`String(document.getElementById("batch-cancel").hidden)`), "true") {
		t.Error("a completed batch offers cancel")
	}
	b.do("download the output", chromedp.Click(chromedp.ID("batch-output")))
	b.wait("the output's link", `!!document.getElementById("batch-output-link") && `+
		`document.getElementById("batch-output-link").href.startsWith("blob:") && `+
		`Number(document.getElementById("batch-output-link").dataset.bytes) > 0`)
	b.shot("dashboard-batch.png")

	// Dead letters: an admin key sees them, inspects one, replays it.
	ns := e.fleet.Topo.NS
	dl := &schemas.DeadLetter{Header: schemas.NewHeader(schemas.KindDeadLetter), Stream: ns.SamplesStream(), Seq: 1,
		Subject: ns.SampleSubject("alpha", "jgone"), Consumer: bus.ConsumerVoters, Reason: "unreadable request",
		Deliveries: 1, Data: []byte(`{"broken":`), At: time.Now().UTC()}
	if err := bus.PublishDeadLetter(ctx, e.fleet.Topo.JS, ns, dl); err != nil {
		t.Fatal(err)
	}
	b.login(e.url, e.admin)
	b.wait("the admin's links", `!document.getElementById("nav-dlq").hidden && !document.getElementById("nav-fleet").hidden`)
	b.hash("#/dlq")
	b.wait("the dead letter", `document.querySelectorAll("#dlq-table tbody tr").length === 1`)
	seq := b.text(`document.querySelector("#dlq-table tbody tr").dataset.seq`)
	b.do("inspect it", chromedp.Click(chromedp.CSS(`#dlq-table tbody tr a`)))
	b.wait("its message and why", `!document.getElementById("dlq-inspect").hidden && `+
		`document.getElementById("dlq-i-data").textContent.includes("broken") && `+
		`document.getElementById("dlq-i-facts").textContent.includes("unreadable request")`)
	b.shot("dashboard-dlq.png")
	b.eval(`window.confirm = () => true`)
	b.do("replay it", chromedp.Click(chromedp.CSS(`#dlq-table tbody input[type=checkbox]`)), chromedp.Click(chromedp.ID("dlq-replay")))
	b.wait("the replay", `document.getElementById("dlq-result").dataset.replayed === "1" && `+
		`!document.querySelector('#dlq-table tbody tr[data-seq="`+seq+`"]')`)

	// The fleet: its voters, where the server has the view.
	b.hash("#/fleet")
	b.wait("the fleet page", `["shown", "unavailable"].includes(document.getElementById("fleet-body").dataset.state)`)
	if b.text(`document.getElementById("fleet-body").dataset.state`) == "unavailable" {
		// Only where the route does not exist.
		req, _ := http.NewRequest(http.MethodGet, e.url+"/v1/fleet", nil)
		req.Header.Set("Authorization", "Bearer "+e.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("the fleet page says not available, but GET /v1/fleet answers %d", resp.StatusCode)
		}
	} else {
		// A voter's presence is renewed every few seconds: refresh until it
		// is there.
		b.eval(`window.__fleetTimer = setInterval(() => document.getElementById("fleet-refresh").click(), 1000)`)
		b.wait("the voters", `Number(document.getElementById("fleet-body").dataset.voters) >= 1`)
		b.eval(`clearInterval(window.__fleetTimer)`)
	}
	b.shot("dashboard-fleet.png")

	// The admin's list of every tenant's jobs shows alpha's.
	b.hash("#/jobs?tenant=*")
	b.do("every tenant's jobs", chromedp.WaitVisible(chromedp.CSS(`#jobs-table a[href="#/jobs/`+done.ID+`?tenant=alpha"]`)))

	e.post("/v1/jobs/"+long.ID+"/cancel", nil, &schemas.ControlResult{})
}
