package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/retention"
	"github.com/makerfleet/makerfleet/schemas"
)

// retentionCmd is `maker retention show|set|unset`.
func retentionCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "retention",
		Short: "Show and set how long finished jobs' journals, reports, records, statuses, dead letters and batches are kept",
	})
	var natsURL, tenant, job string
	var asJSON bool
	show := &cobra.Command{
		Use:   "show",
		Short: "Show the retention in effect (--tenant, --job: theirs) and the policies stored",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkScope(tenant, job); err != nil {
				return err
			}
			kv, done, err := policyBucket(cmd.Context(), natsURL)
			if err != nil {
				return err
			}
			defer done()
			recs, lerr := retention.List(cmd.Context(), kv)
			pol, perr := retention.Load(cmd.Context(), kv)
			if perr != nil {
				// An unreadable policy stops every sweep: the ages the
				// defaults would give are not what is in effect.
				fmt.Fprintf(e.stderr, "maker: the retention in effect is unknown, and sweeps remove nothing, until this is fixed or unset: %v\n", perr)
				if asJSON {
					return perr
				}
			}
			eff := pol.For(tenant, job)
			if asJSON {
				if recs == nil {
					recs = []schemas.RetentionPolicy{}
				}
				return writeJSON(e.stdout, struct {
					Tenant    string                    `json:"tenant,omitempty"`
					JobID     string                    `json:"job_id,omitempty"`
					Effective map[string]string         `json:"effective"`
					Policies  []schemas.RetentionPolicy `json:"policies"`
				}{tenant, job, agesMap(eff), recs})
			}
			scope := "fleet"
			if tenant != "" {
				scope = "tenant " + tenant
			}
			if job != "" {
				scope += " job " + job
			}
			if perr == nil {
				fmt.Fprintf(e.stdout, "in effect for the %s (0 = kept forever):\n", scope)
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				for _, k := range ageKinds {
					fmt.Fprintf(tw, "  %s\t%s\n", k, agesMap(eff)[k])
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			fmt.Fprintf(e.stdout, "%d polic(ies) stored\n", len(recs))
			for _, r := range recs {
				fmt.Fprintf(e.stdout, "  %s: %s\n", retention.Key(r.Tenant, r.JobID), setAges(r.RetentionAges))
			}
			return errors.Join(lerr, perr)
		},
	}
	natsFlag(show, &natsURL)
	show.Flags().StringVar(&tenant, "tenant", "", "show this tenant's retention")
	show.Flags().StringVar(&job, "job", "", "show this job's retention (with --tenant)")
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	var flags [6]string
	set := &cobra.Command{
		Use:   "set",
		Short: "Set how long finished work is kept: fleet-wide, for a --tenant, or for one --job (0 keeps forever)",
		Long: `Sets retention ages (Go durations: 72h, 720h; 0 keeps forever) fleet-wide, for a
tenant (--tenant) or for one of its jobs (--tenant --job). Ages not given are
kept as stored; unset ones inherit (job, then tenant, then fleet, then the
built-in defaults: journal 168h, reports 720h, registry 720h, status 24h, dlq
168h, batches 720h). The registry record is kept at least as long as the job's
journal, report and status. Coordinators apply it at their next sweep.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkScope(tenant, job); err != nil {
				return err
			}
			var ages schemas.RetentionAges
			ptrs := agePtrs(&ages)
			n := 0
			for i, k := range ageKinds {
				if !cmd.Flags().Changed(k) {
					continue
				}
				d, err := time.ParseDuration(flags[i])
				if err != nil || d < 0 || (d > 0 && d < time.Second) {
					return usagef("--%s %q: want a duration >= 1s (72h), or 0 to keep forever", k, flags[i])
				}
				secs := int64(d / time.Second)
				*ptrs[i] = &secs
				n++
			}
			if n == 0 {
				return usagef("give at least one of --%s", strings.Join(ageKinds, ", --"))
			}
			kv, done, err := policyBucket(cmd.Context(), natsURL)
			if err != nil {
				return err
			}
			defer done()
			rec, err := retention.Set(cmd.Context(), kv, tenant, job, ages, time.Now())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, rec)
			}
			_, err = fmt.Fprintf(e.stdout, "retention of %s: %s\n", retention.Key(tenant, job), setAges(rec.RetentionAges))
			return err
		},
	}
	natsFlag(set, &natsURL)
	set.Flags().StringVar(&tenant, "tenant", "", "set this tenant's retention (default the fleet's)")
	set.Flags().StringVar(&job, "job", "", "set this job's retention (with --tenant)")
	set.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	for i, k := range ageKinds {
		set.Flags().StringVar(&flags[i], k, "", "keep "+ageHelp[i]+" this long after the end (0: forever)")
	}

	unset := &cobra.Command{
		Use:   "unset",
		Short: "Remove the fleet's, a --tenant's or a --job's policy: it inherits again",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkScope(tenant, job); err != nil {
				return err
			}
			kv, done, err := policyBucket(cmd.Context(), natsURL)
			if err != nil {
				return err
			}
			defer done()
			return retention.Unset(cmd.Context(), kv, tenant, job)
		},
	}
	natsFlag(unset, &natsURL)
	unset.Flags().StringVar(&tenant, "tenant", "", "this tenant's policy (default the fleet's)")
	unset.Flags().StringVar(&job, "job", "", "this job's policy (with --tenant)")
	cmd.AddCommand(show, set, unset)
	return cmd
}

// The kinds of retention, as flags, in order.
var (
	ageKinds = []string{"journal", "reports", "registry", "status", "dlq", "batches"}
	ageHelp  = []string{"a finished job's journal", "a finished job's report", "a finished job's registry record",
		"a finished job's status", "dead letters", "a finished batch's record and lines"}
)

func agePtrs(a *schemas.RetentionAges) []**int64 {
	return []**int64{&a.JournalSeconds, &a.ReportsSeconds, &a.RegistrySeconds, &a.StatusSeconds, &a.DLQSeconds, &a.BatchesSeconds}
}

func agesMap(a retention.Ages) map[string]string {
	ds := []time.Duration{a.Journal, a.Reports, a.Registry, a.Status, a.DLQ, a.Batches}
	m := map[string]string{}
	for i, k := range ageKinds {
		m[k] = ds[i].String()
	}
	return m
}

// setAges lists the ages a stored policy sets.
func setAges(a schemas.RetentionAges) string {
	var parts []string
	for i, p := range agePtrs(&a) {
		if *p != nil {
			parts = append(parts, ageKinds[i]+"="+(time.Duration(**p)*time.Second).String())
		}
	}
	if len(parts) == 0 {
		return "(nothing set)"
	}
	return strings.Join(parts, " ")
}

// policyBucket dials the fleet at natsURL and opens its retention bucket
// (the policies); done closes the connection.
func policyBucket(ctx context.Context, natsURL string) (kv jetstream.KeyValue, done func(), err error) {
	f, err := dialFleet(ctx, natsURL, "maker-retention")
	if err != nil {
		return nil, nil, err
	}
	if kv, err = retention.OpenBucket(ctx, f.topo); err != nil {
		f.Close()
		return nil, nil, err
	}
	return kv, f.Close, nil
}
