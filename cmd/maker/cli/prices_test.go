package cli

import (
	"strings"
	"testing"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/auth/authtest"
	"github.com/makerfleet/makerfleet/schemas"
)

// TestPricesCommands: maker prices sets, shows and removes the fleet's
// prices (the default record first), by any model name; bad input is
// refused with exit 2 before anything is written.
func TestPricesCommands(t *testing.T) {
	t.Parallel()
	maker := onFleet(t)
	decode := func(o outcome, v any) {
		t.Helper()
		decodeOK(t, o, v)
	}
	var p schemas.ModelPrice
	decode(maker("prices", "set", "--model", "openai/gpt-5.5", "--input", "5", "--output", "20", "--json"), &p)
	if p.Model != "openai/gpt-5.5" || p.InputUSDPerMTok != 5 || p.OutputUSDPerMTok != 20 || p.UpdatedAt.IsZero() {
		t.Fatalf("set: %+v", p)
	}
	p = schemas.ModelPrice{} // fields left out (omitempty) are zero
	decode(maker("prices", "set", "--default", "--input", "0.15", "--output", "0.6", "--json"), &p)
	if !p.Default || p.Model != "" {
		t.Fatalf("set --default: %+v", p)
	}
	var list schemas.PriceList
	decode(maker("prices", "show", "--json"), &list)
	if len(list.Prices) != 2 || !list.Prices[0].Default || list.Prices[1].Model != "openai/gpt-5.5" {
		t.Fatalf("show: %+v", list)
	}
	decode(maker("prices", "show", "--model", "openai/gpt-5.5", "--json"), &p)
	if p.OutputUSDPerMTok != 20 {
		t.Fatalf("show --model: %+v", p)
	}
	if text := maker("prices", "show"); text.code != ExitOK || !strings.Contains(text.stdout, "(default)") || !strings.Contains(text.stdout, "openai/gpt-5.5") {
		t.Fatalf("text show: %d %q %q", text.code, text.stdout, text.stderr)
	}
	for _, args := range [][]string{
		{"prices", "set", "--input", "1", "--output", "1"},                              // no model
		{"prices", "set", "--model", "m", "--default", "--input", "1", "--output", "1"}, // both
		{"prices", "set", "--model", "m", "--input", "1"},                               // no --output
		{"prices", "set", "--model", "m", "--input", "-1", "--output", "1"},             // negative
		{"prices", "set", "--model", "m", "--input", "1", "--output", "1e7"},            // huge
		{"prices", "set", "--model", "m", "--input", "NaN", "--output", "1"},            // NaN
		{"prices", "set", "--model", "m\nX", "--input", "1", "--output", "1"},           // control character
		{"prices", "set", "--model", " m", "--input", "1", "--output", "1"},             // space around
		{"prices", "unset"}, // no model
	} {
		if o := maker(args...); o.code != ExitUsage {
			t.Errorf("%q: exit %d (%s), want %d", args, o.code, o.stderr, ExitUsage)
		}
	}
	decode(maker("prices", "show", "--json"), &list)
	if len(list.Prices) != 2 {
		t.Fatalf("a refused set wrote: %+v", list)
	}
	if o := maker("prices", "unset", "--model", "openai/gpt-5.5"); o.code != ExitOK || !strings.Contains(o.stdout, "removed the price of openai/gpt-5.5") {
		t.Fatalf("unset: %d %q %q", o.code, o.stdout, o.stderr)
	}
	if o := maker("prices", "unset", "--model", "openai/gpt-5.5"); o.code == ExitOK || !strings.Contains(o.stderr, "no price set") {
		t.Errorf("unset twice: %d %q", o.code, o.stderr)
	}
	if o := maker("prices", "show", "--model", "openai/gpt-5.5"); o.code == ExitOK || !strings.Contains(o.stderr, "unpriced") {
		t.Errorf("show of an unpriced model: %d %q", o.code, o.stderr)
	}
}

// TestPricesSecured: on a secured fleet the admin sets prices; a voter,
// a coordinator and the approver are refused at once (permission denied).
func TestPricesSecured(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	as := func(id string, args ...string) outcome {
		return runMain(t, append(args, "--nats", srv.URL, "--nats-nkey", srv.Seed(id))...)
	}
	if res := as(auth.Admin, "topology", "create", "--judge=false"); res.code != ExitOK {
		t.Fatalf("topology create: %d %s", res.code, res.stderr)
	}
	if res := as(auth.Admin, "prices", "set", "--default", "--input", "1", "--output", "2"); res.code != ExitOK {
		t.Fatalf("admin: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, id := range []string{auth.Voter, auth.Coordinator, auth.Approver} {
		res := as(id, "prices", "set", "--default", "--input", "0", "--output", "0")
		if res.code != ExitError || !strings.Contains(res.stderr, "permission denied") {
			t.Errorf("%s: exit %d, stderr %q; want permission denied", id, res.code, res.stderr)
		}
	}
	if res := as(auth.API, "prices", "show", "--json"); res.code != ExitOK || !strings.Contains(res.stdout, `"input_usd_per_mtok": 1`) {
		t.Errorf("api reads the prices: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}
