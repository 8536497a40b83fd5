package cli

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/retention"
)

// purgeCmd is `maker jobs purge`: remove everything of the jobs finished
// before a time (internal/retention).
func purgeCmd(e *env) *cobra.Command {
	var (
		natsURL, before, tenant string
		dryRun, asJSON, force   bool
	)
	cmd := &cobra.Command{
		Use:   "purge --before TIME",
		Short: "Remove the journal, report, status and record of jobs finished before TIME (and older dead letters and batches)",
		Long: `Removes everything the fleet keeps of the jobs that finished before TIME: their
decision journal, report, status and registry record (their lease too when they
finished more than a day ago), the dead letters stored before TIME, and the
batches that ended before TIME (record and lines). Jobs not finished (queued,
running, paused) and the jobs of running batches are never touched. TIME is
RFC 3339 (2026-11-01T00:00:00Z) or a duration back from now (720h); a TIME less
than 1h ago (--before 0 would purge every finished job, reports clients are about
to read included) is refused unless --force. With --dry-run nothing is removed:
what would go is listed. Needs the admin's (or the coordinator's) NATS identity.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := time.Now()
			at, err := parseBefore(before, now)
			if err != nil {
				return err
			}
			if !force && !dryRun && at.After(now.Add(-minPurgeAge)) {
				return usagef("--before %s is less than %v ago: it would remove the reports of jobs that just finished, which clients may be about to read; give --force to purge anyway",
					at.UTC().Format(time.RFC3339), minPurgeAge)
			}
			if tenant != "" {
				if err := checkTenant(tenant); err != nil {
					return err
				}
			}
			f, err := dialFleet(cmd.Context(), natsURL, "maker-purge")
			if err != nil {
				return err
			}
			defer f.Close()
			sw, err := retention.New(cmd.Context(), f.topo, retention.Config{Owner: cliOwner("purge"), LeaseTTL: 10 * time.Minute})
			if err != nil {
				return err
			}
			res, err := sw.Run(cmd.Context(), now, retention.Options{Before: at, Tenant: tenant, DryRun: dryRun})
			if err != nil {
				return err
			}
			if asJSON {
				if res.Items == nil {
					res.Items = []retention.Item{}
				}
				return writeJSON(e.stdout, struct {
					DryRun bool      `json:"dry_run"`
					Before time.Time `json:"before"`
					retention.Result
				}{dryRun, at.UTC(), res})
			}
			if dryRun {
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "KIND\tTENANT\tID\tENDED\tWOULD REMOVE\tMESSAGES")
				for _, it := range res.Items {
					ended := "-"
					if !it.Ended.IsZero() {
						ended = it.Ended.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", it.Kind, it.Tenant, it.ID, ended, strings.Join(it.What, ","), it.Msgs)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			_, err = fmt.Fprintf(e.stdout, "%s: %s\n", verb, countsLine(res.Counts))
			return err
		},
	}
	natsFlag(cmd, &natsURL)
	cmd.Flags().StringVar(&before, "before", "", "remove what finished before this time: RFC 3339, or a duration back from now (720h) (required)")
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's jobs, batches and dead letters (default every tenant's)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "remove nothing; list what would go")
	cmd.Flags().BoolVar(&force, "force", false, "purge even with a --before less than 1h ago")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// minPurgeAge is how long ago --before must be without --force.
const minPurgeAge = time.Hour

// parseBefore reads --before: RFC 3339, or a duration back from now. A
// time in the future is refused.
func parseBefore(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, usagef("--before is required")
	}
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		d, derr := time.ParseDuration(s)
		if derr != nil {
			return time.Time{}, usagef("--before %q: want an RFC 3339 time (2026-11-01T00:00:00Z) or a duration back from now (720h)", s)
		}
		if d < 0 {
			return time.Time{}, usagef("--before %q: a duration back from now must not be negative", s)
		}
		at = now.Add(-d)
	}
	if at.After(now) {
		return time.Time{}, usagef("--before %s is in the future: refusing to purge running time", at.UTC().Format(time.RFC3339))
	}
	return at, nil
}

func countsLine(c retention.Counts) string {
	return fmt.Sprintf("%d jobs (%d journal messages, %d reports, %d statuses, %d records, %d leases), %d dead letters, %d batches (%d lines)",
		c.Jobs, c.JournalMessages, c.Reports, c.Statuses, c.Records, c.Leases, c.DeadLetters, c.Batches, c.BatchLines)
}

// cliOwner names a CLI command in a lease.
func cliOwner(what string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("maker-%s-%s-%d", what, host, os.Getpid())
}
