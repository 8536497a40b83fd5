package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/internal/testkit"
)

// TestBudgetCommands sets a job's budget and shows it, and the tenant's
// day; bad input exits with the usage code and changes nothing. (On
// miniredis: the scripts are tested on redis-server in internal/quota,
// and a redis-server starting up is dialled before it listens, which
// go-redis logs through this package's process-wide logger.)
func TestBudgetCommands(t *testing.T) {
	t.Parallel()
	r := testkit.StartMiniredis(t)
	url := r.URL()

	// Usage errors first: nothing is written.
	for _, args := range [][]string{
		{"budget", "set", "--usd", "2"},                      // no job
		{"budget", "set", "--job", "acme/j1"},                // no --usd
		{"budget", "set", "--job", "acme/j1", "--usd", "-1"}, // negative
		{"budget", "set", "--job", "acme/j1", "--usd", "2000000"},
		{"budget", "set", "--job", "acme/j1", "--tenant", "other", "--usd", "2"}, // two tenants
		{"budget", "set", "--job", "bad id!", "--usd", "2"},
		{"budget", "show", "--tenant", "acme", "--day", "yesterday"},
	} {
		res := runMain(t, append(args, "--redis", url)...)
		if res.code != ExitUsage || res.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d", args, res.code, res.stdout, res.stderr, ExitUsage)
		}
	}
	if res := runMain(t, "budget", "show", "--job", "acme/j1", "--redis", url); res.code != ExitError || !strings.Contains(res.stderr, "no budget record") {
		t.Fatalf("show before any set: exit %d, stderr %q; want exit 1, no budget record", res.code, res.stderr)
	}

	res := runMain(t, "budget", "set", "--job", "acme/j1", "--usd", "2.5", "--redis", url, "--json")
	if res.code != ExitOK {
		t.Fatalf("set: exit %d, stderr %q", res.code, res.stderr)
	}
	var set accountJSON
	if err := json.Unmarshal([]byte(res.stdout), &set); err != nil {
		t.Fatalf("set --json: %v in %q", err, res.stdout)
	}
	if set != (accountJSON{Tenant: "acme", JobID: "j1", LimitUSD: 2.5, LeftUSD: 2.5}) {
		t.Fatalf("set --json: %+v", set)
	}

	// Spend some of it and of the tenant's day, as a coordinator would.
	ctx := context.Background()
	b, err := store.NewBudgets(r.Client(t), store.BudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	job := store.JobRef{Tenant: "acme", JobID: "j1"}
	day := store.Day(time.Now())
	if _, err := b.Claim(ctx, job, 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reserve(ctx, store.Reservation{Job: job, Token: 1, ID: "1", Day: day, Amount: pricing.USD(1), DayLimit: pricing.USD(10)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Settle(ctx, store.Settlement{Job: job, Token: 1, ID: "s", Day: day, Reserved: pricing.USD(0.5), Total: pricing.USD(0.25)}); err != nil {
		t.Fatal(err)
	}

	res = runMain(t, "budget", "show", "--job", "j1", "--tenant", "acme", "--redis", url, "--json")
	if res.code != ExitOK {
		t.Fatalf("show: exit %d, stderr %q", res.code, res.stderr)
	}
	var shown map[string]accountJSON
	if err := json.Unmarshal([]byte(res.stdout), &shown); err != nil {
		t.Fatalf("show --json: %v in %q", err, res.stdout)
	}
	if want := (accountJSON{Tenant: "acme", JobID: "j1", LimitUSD: 2.5, SpentUSD: 0.25, ReservedUSD: 0.5, LeftUSD: 1.75}); shown["job"] != want {
		t.Errorf("job: %+v, want %+v", shown["job"], want)
	}
	if want := (accountJSON{Tenant: "acme", Day: day, LimitUSD: 10, SpentUSD: 0.25, ReservedUSD: 0.5, LeftUSD: 9.25}); shown["tenant_day"] != want {
		t.Errorf("tenant day: %+v, want %+v", shown["tenant_day"], want)
	}

	res = runMain(t, "budget", "show", "--tenant", "acme", "--redis", url)
	if want := "acme on " + day + ": limit $10 ($9.25 left), spent $0.25, reserved $0.5\n"; res.code != ExitOK || res.stdout != want {
		t.Errorf("show --tenant: exit %d, stdout %q, want %q (stderr %q)", res.code, res.stdout, want, res.stderr)
	}
	// Raising the budget keeps what was spent.
	res = runMain(t, "budget", "set", "--job", "acme/j1", "--usd", "5", "--redis", url)
	if want := "acme/j1: limit $5 ($4.25 left), spent $0.25, reserved $0.5\n"; res.code != ExitOK || res.stdout != want ||
		!strings.Contains(res.stderr, "maker resume acme/j1") {
		t.Errorf("raise: exit %d, stdout %q, want %q; stderr %q", res.code, res.stdout, want, res.stderr)
	}
}
