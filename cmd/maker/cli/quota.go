package cli

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/quota"
	"github.com/makerfleet/makerfleet/schemas"
)

// quotaCmd sets and shows tenants' quotas and the fleet's in-flight
// capacity (KV bucket maker_quotas): every coordinator applies a change
// within a second, without a restart.
func quotaCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "quota",
		Short: "Set or show tenants' quotas and the fleet's capacity (applied live by every coordinator)",
		Long: `A tenant's quotas: running jobs, sample requests in flight, samples per second (one
token bucket in Redis shared by every coordinator), spend per UTC day, and its weight in a
contended fleet. The fleet's record (--fleet) holds its in-flight capacity: what the voters can
answer at once, shared weighted-fair among the tenants that want more. Zero means no limit.`,
	})
	var (
		natsURL, tenant string
		fleet, asJSON   bool
		q               schemas.TenantQuota
	)
	set := &cobra.Command{
		Use:   "set",
		Short: "Change a tenant's quotas (or, with --fleet, the fleet's capacity); flags not given keep their value",
		Example: `  maker quota set --tenant acme --max-running-jobs 4 --rate 50 --weight 2
  maker quota set --fleet --max-inflight 64`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fleet == (tenant != "") {
				return usagef("give --tenant T or --fleet")
			}
			fl := cmd.Flags()
			if fleet {
				for _, name := range []string{"max-running-jobs", "rate", "burst", "spend-per-day", "weight"} {
					if fl.Changed(name) {
						return usagef("--%s is a tenant's quota; the fleet's record holds --max-inflight", name)
					}
				}
			}
			st, done, err := quotaStore(cmd.Context(), natsURL, tenant)
			if err != nil {
				return err
			}
			defer done()
			cur, err := st.Get(cmd.Context(), tenant)
			if fleet {
				cur, err = st.Fleet(cmd.Context())
			}
			if err != nil {
				return err
			}
			cur.Tenant = tenant
			if fl.Changed("max-running-jobs") {
				cur.MaxRunningJobs = q.MaxRunningJobs
			}
			if fl.Changed("max-inflight") {
				cur.MaxInflightSamples = q.MaxInflightSamples
			}
			if fl.Changed("rate") {
				cur.SamplesPerSecond = q.SamplesPerSecond
			}
			if fl.Changed("burst") {
				cur.Burst = q.Burst
			}
			if fl.Changed("spend-per-day") {
				cur.SpendPerDayUSD = q.SpendPerDayUSD
			}
			if fl.Changed("weight") {
				cur.Weight = q.Weight
			}
			saved, err := st.Set(cmd.Context(), cur)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, saved)
			}
			return printQuotas(e, []schemas.TenantQuota{saved})
		},
	}
	natsFlag(set, &natsURL)
	set.Flags().StringVar(&tenant, "tenant", "", "the tenant whose quotas change")
	set.Flags().BoolVar(&fleet, "fleet", false, "change the fleet's record (its in-flight capacity) instead")
	set.Flags().IntVar(&q.MaxRunningJobs, "max-running-jobs", 0, "jobs running at once, fleet-wide (0: no limit)")
	set.Flags().IntVar(&q.MaxInflightSamples, "max-inflight", 0, "sample requests in flight at once (0: no limit); with --fleet, the fleet's capacity")
	set.Flags().Float64Var(&q.SamplesPerSecond, "rate", 0, "sample requests per second (0: no limit)")
	set.Flags().IntVar(&q.Burst, "burst", 0, "the rate's bucket size (0: one second's worth)")
	set.Flags().Float64Var(&q.SpendPerDayUSD, "spend-per-day", 0, "US dollars its jobs may spend per UTC day (0: no limit)")
	set.Flags().Float64Var(&q.Weight, "weight", 0, "its share of a contended fleet relative to other tenants' (0: 1)")
	set.Flags().BoolVar(&asJSON, "json", false, "print the stored record as JSON")

	show := &cobra.Command{
		Use:   "show",
		Short: "Show a tenant's quotas, or every record (the fleet's first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, done, err := quotaStore(cmd.Context(), natsURL, tenant)
			if err != nil {
				return err
			}
			defer done()
			var qs []schemas.TenantQuota
			if tenant != "" {
				q, err := st.Get(cmd.Context(), tenant)
				if err != nil {
					return err
				}
				q.Tenant = tenant
				qs = []schemas.TenantQuota{q}
			} else if qs, err = st.List(cmd.Context()); err != nil {
				return err
			}
			if asJSON {
				if tenant != "" {
					return writeJSON(e.stdout, qs[0])
				}
				if qs == nil {
					qs = []schemas.TenantQuota{}
				}
				return writeJSON(e.stdout, qs)
			}
			return printQuotas(e, qs)
		},
	}
	natsFlag(show, &natsURL)
	show.Flags().StringVar(&tenant, "tenant", "", "the tenant to show (default: every record)")
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(set, show)
	return cmd
}

// quotaStore checks tenant (when one is given) and binds the fleet's
// quota bucket; done closes the connection.
func quotaStore(ctx context.Context, natsURL, tenant string) (st *quota.Store, done func(), err error) {
	if tenant != "" {
		if err := schemas.ValidTenant(tenant); err != nil {
			return nil, nil, usagef("%v", err)
		}
	}
	f, err := dialFleet(ctx, natsURL, "maker-quota")
	if err != nil {
		return nil, nil, err
	}
	return quota.New(f.topo), f.Close, nil
}

// printQuotas writes quota records as a table; "-" is no limit.
func printQuotas(e *env, qs []schemas.TenantQuota) error {
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tRUNNING JOBS\tIN FLIGHT\tRATE/S\tBURST\tSPEND/DAY USD\tWEIGHT\tUPDATED")
	num := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	for _, q := range qs {
		name := q.Tenant
		if name == "" {
			name = "(fleet)"
		}
		burst, weight := "-", "-"
		if q.SamplesPerSecond > 0 {
			burst = strconv.Itoa(q.EffectiveBurst())
		}
		if q.Tenant != "" {
			weight = num(q.EffectiveWeight())
		}
		updated := "-"
		if !q.UpdatedAt.IsZero() {
			updated = q.UpdatedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, num(float64(q.MaxRunningJobs)), num(float64(q.MaxInflightSamples)),
			num(q.SamplesPerSecond), burst, num(q.SpendPerDayUSD), weight, updated)
	}
	return tw.Flush()
}
