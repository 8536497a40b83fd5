package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/store"
	"github.com/makerfleet/makerfleet/schemas"
)

// budgetCmd is `maker budget`: a job's budget and a tenant's spend for the
// day, as the coordinators keep them in Redis (internal/quota, budget.go).
func budgetCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "budget",
		Short: "Show and raise budgets: a job's, and what a tenant spent today",
		Long: budgetHelp + `

A job that would go over pauses as budget_exhausted, with what finishing is expected to
cost in its status; raise its budget with maker budget set, then maker resume it.`,
	})
	cmd.AddCommand(budgetSetCmd(e), budgetShowCmd(e))
	return cmd
}

// budgetFlags are the flags both subcommands share.
type budgetFlags struct {
	redisURL, job, tenant, prefix string
	asJSON                        bool
	api                           *apiFlags
}

func (f *budgetFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.redisURL, "redis", envOr("MAKER_REDIS_URL", "redis://127.0.0.1:6379/0"),
		"the fleet's Redis URL (as maker coordinator --redis) [$MAKER_REDIS_URL]")
	cmd.Flags().StringVar(&f.job, "job", "", "the job: its id (in --tenant), or tenant/id")
	cmd.Flags().StringVar(&f.tenant, "tenant", schemas.DefaultTenant, "the tenant (a --job of the form tenant/id must name the same; with --api default the API key's)")
	cmd.Flags().StringVar(&f.prefix, "key-prefix", store.DefaultKeyPrefix, "the fleet's Redis key prefix (its namespace)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	f.api = addAPIFlags(cmd)
	cmd.Long = budgetHelp
}

// budgetHelp is the Long text of both subcommands.
const budgetHelp = `Budgets are kept in Redis, where every coordinator reserves a wave's cost before it
publishes it and spends what the answers cost: a job's budget (its spec's budget_usd,
unless raised here) and its tenant's spend per day (maker quota set --spend-per-day).

Two ways to reach them: --redis URL reads the fleet's Redis (the operator); --api URL
--api-key KEY goes through maker serve's HTTP API as the key's tenant (GET and PUT
/v1/jobs/{id}/budget, GET /v1/usage: today's spend of the key's own tenant only;
$MAKER_API_URL and $MAKER_API_KEY set them). The output is the same.`

// budgets returns the budget accounts: through the API (--api), else in
// the fleet's Redis (checking it answers).
func (f *budgetFlags) budgets(cmd *cobra.Command) (budgetsPort, error) {
	hc, err := f.api.client(cmd)
	if err != nil {
		return nil, err
	}
	if hc != nil {
		return apiBudgets{hc}, nil
	}
	rdb, err := dialRedis(cmd.Context(), f.redisURL)
	if err != nil {
		return nil, err
	}
	b, err := store.NewBudgets(rdb, store.BudgetConfig{KeyPrefix: f.prefix})
	if err != nil {
		_ = rdb.Close()
		return nil, usageError{err}
	}
	return redisBudgets{b: b, close: func() { _ = rdb.Close() }}, nil
}

// ref reads --job (and --tenant): with --api, tenant "" (the key's)
// unless one is named.
func (f *budgetFlags) ref(cmd *cobra.Command) (tenant, job string, err error) {
	tenantSet := cmd.Flags().Changed("tenant")
	if f.job != "" {
		tenant, job, err = jobRef(f.job, f.tenant, tenantSet)
		if err == nil && f.api.url != "" && !tenantSet && !strings.Contains(f.job, "/") {
			tenant = ""
		}
		return tenant, job, err
	}
	if err := checkTenant(f.tenant); err != nil {
		return "", "", err
	}
	if f.api.url != "" && !tenantSet {
		return "", "", nil
	}
	return f.tenant, "", nil
}

// accountJSON is an account as the commands print it, in US dollars.
type accountJSON struct {
	Tenant      string  `json:"tenant"`
	JobID       string  `json:"job_id,omitempty"`
	Day         string  `json:"day,omitempty"`
	LimitUSD    float64 `json:"limit_usd"`
	SpentUSD    float64 `json:"spent_usd"`
	ReservedUSD float64 `json:"reserved_usd"`
	LeftUSD     float64 `json:"left_usd,omitempty"`
}

func accountOf(tenant, job, day string, a store.Account) accountJSON {
	out := accountJSON{Tenant: tenant, JobID: job, Day: day, LimitUSD: a.Limit.USD(), SpentUSD: a.Spent.USD(), ReservedUSD: a.Reserved.USD()}
	if a.Limit > 0 {
		out.LeftUSD = a.Left().USD()
	}
	return out
}

func (a accountJSON) print(w io.Writer) {
	usd := func(v float64) string { return "$" + strconv.FormatFloat(v, 'f', -1, 64) }
	limit := "no limit"
	if a.LimitUSD > 0 {
		limit = fmt.Sprintf("limit %s (%s left)", usd(a.LimitUSD), usd(a.LeftUSD))
	}
	name := a.Tenant + "/" + a.JobID
	if a.JobID == "" {
		name = a.Tenant + " on " + a.Day
	}
	fmt.Fprintf(w, "%s: %s, spent %s, reserved %s\n", name, limit, usd(a.SpentUSD), usd(a.ReservedUSD))
}

func budgetSetCmd(e *env) *cobra.Command {
	var f budgetFlags
	var usd float64
	cmd := &cobra.Command{
		Use:   "set --job JOB --usd X",
		Short: "Set a job's budget (raise it to let a budget_exhausted job go on once resumed)",
		Example: `  maker budget set --job acme/hanoi-12 --usd 5
  maker resume acme/hanoi-12
  maker budget set --job hanoi-12 --usd 5 --api http://127.0.0.1:8000 --api-key "$KEY"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.job == "" {
				return usagef("--job is required")
			}
			if !cmd.Flags().Changed("usd") {
				return usagef("--usd is required (0: no budget of the job's own)")
			}
			if !(usd >= 0 && usd <= schemas.MaxBudgetUSD) {
				return usagef("--usd must be between 0 and %d, got %v", schemas.MaxBudgetUSD, usd)
			}
			tenant, job, err := f.ref(cmd)
			if err != nil {
				return err
			}
			b, err := f.budgets(cmd)
			if err != nil {
				return err
			}
			defer b.Close()
			out, err := b.SetJob(cmd.Context(), tenant, job, usd)
			if err != nil {
				return clientErr(err)
			}
			if f.asJSON {
				return writeJSON(e.stdout, out)
			}
			out.print(e.stdout)
			fmt.Fprintf(e.stderr, "A job paused as budget_exhausted goes on once resumed: maker resume %s/%s\n", out.Tenant, out.JobID)
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().Float64Var(&usd, "usd", 0, "the job's budget in US dollars (0: none of its own; its tenant's spend per day still holds)")
	return cmd
}

func budgetShowCmd(e *env) *cobra.Command {
	var f budgetFlags
	var day string
	cmd := &cobra.Command{
		Use:   "show [--job JOB | --tenant T]",
		Short: "Show a job's budget, or what a tenant spent and holds reserved on a day (today by default)",
		Example: `  maker budget show --job acme/hanoi-12
  maker budget show --tenant acme --json
  maker budget show --api http://127.0.0.1:8000 --api-key "$KEY"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if day != "" {
				if _, err := time.Parse(time.DateOnly, day); err != nil {
					return usagef("--day %q: want YYYY-MM-DD", day)
				}
			}
			tenant, job, err := f.ref(cmd)
			if err != nil {
				return err
			}
			b, err := f.budgets(cmd)
			if err != nil {
				return err
			}
			defer b.Close()
			return clientErr(showBudget(cmd.Context(), e, b, tenant, job, day, f.asJSON))
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&day, "day", "", "the UTC day of the tenant's spend, YYYY-MM-DD (default today)")
	return cmd
}

// showBudget prints the job's account (when job is set) and the tenant's
// for day ("" today).
func showBudget(ctx context.Context, e *env, b budgetsPort, tenant, job, day string, asJSON bool) error {
	var out []accountJSON
	if job != "" {
		a, err := b.Job(ctx, tenant, job)
		if err != nil {
			return err
		}
		out = append(out, a)
		tenant = a.Tenant
	}
	d, err := b.TenantDay(ctx, tenant, day)
	if err != nil {
		return err
	}
	out = append(out, d)
	if asJSON {
		if job != "" {
			return writeJSON(e.stdout, map[string]accountJSON{"job": out[0], "tenant_day": out[1]})
		}
		return writeJSON(e.stdout, out[0])
	}
	for _, a := range out {
		a.print(e.stdout)
	}
	return nil
}
