package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/makerfleet/makerfleet/internal/dashboard"
)

// TestPageTotals runs the page's own step bookkeeping in headless
// Chromium: red-flag reasons are counted in a Map, so a reason named like
// an Object property ("constructor", "toString") counts right; a chart
// keeps at most MAX_POINTS points, and its outliers, however long the job.
func TestPageTotals(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	srv := httptest.NewServer(dashboard.Wrap(http.NotFoundHandler()))
	defer srv.Close()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	// The first run starts the browser: no timeout on its context.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	run, rcancel := context.WithTimeout(bctx, 90*time.Second)
	defer rcancel()
	const probe = `(() => {
	  const v = newView('x');
	  addStep(v, {type: 'decision', step: 0, samples: 5, counted: 5, valid: 2, red_flagged: 3, votes: 2, lead: 2,
	    red_flags: {constructor: 2, toString: 1}});
	  addStep(v, {type: 'decision', step: 1, samples: 3, counted: 3, valid: 2, red_flagged: 1, votes: 2, lead: 2,
	    red_flags: {constructor: 1}});
	  const pts = [];
	  for (let i = 0; i < 12345; i++) pushPoint(pts, [i, i === 7777 ? 99 : 1], Math.max);
	  return {constructor: v.redFlags.get('constructor'), toString: v.redFlags.get('toString'),
	    reasons: v.redFlags.size, points: pts.length, max: Math.max(...pts.map((p) => p[1])), maxPoints: MAX_POINTS};
	})()`
	if err := chromedp.Do(run, chromedp.Navigate(srv.URL+dashboard.Path), chromedp.WaitVisible(chromedp.ID("key-input"))); err != nil {
		t.Fatal(err)
	}
	type totals struct {
		Constructor int `json:"constructor"`
		ToString    int `json:"toString"`
		Reasons     int `json:"reasons"`
		Points      int `json:"points"`
		Max         int `json:"max"`
		MaxPoints   int `json:"maxPoints"`
	}
	got, err := chromedp.Run(run, chromedp.Evaluate[totals](probe))
	if err != nil {
		t.Fatal(err)
	}
	if got.Constructor != 3 || got.ToString != 1 || got.Reasons != 2 {
		t.Errorf("red flags %+v, want constructor 3, toString 1, 2 reasons", got)
	}
	if got.MaxPoints != 5000 || got.Points > got.MaxPoints || got.Points < got.MaxPoints/2 || got.Max != 99 {
		t.Errorf("points %+v, want at most %d, at least half that, the outlier 99 kept", got, got.MaxPoints)
	}
}
