package cli

import (
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

func dlqCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "dlq",
		Short: "Inspect and replay dead letters: requests the fleet gave up on, with why",
	})
	var (
		natsURL, tenant, job    string
		listTenant              string // list's: it has a default, replay's has none
		asJSON, all, allTenants bool
		limit                   int
	)
	var api *apiFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's dead letters, oldest first (--all-tenants: every tenant's)",
		Long: `Lists a tenant's dead letters, oldest first: requests the fleet gave up on, with why.
` + apiHelp + `
--all-tenants over the API needs an admin key, and the API lists at most 1000.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hc, err := api.client(cmd)
			if err != nil {
				return err
			}
			tenantSet := cmd.Flags().Changed("tenant")
			if allTenants && tenantSet {
				return usagef("give --tenant or --all-tenants, not both")
			}
			tenant := listTenant
			if allTenants {
				tenant = ""
			} else if tenant == "" {
				return usagef("--tenant is required (or --all-tenants)")
			}
			if err := checkFilter(tenant, job); err != nil {
				return err
			}
			if limit < 1 {
				return usagef("--limit must be >= 1")
			}
			var dlq deadLettersPort
			if hc != nil {
				dlq = apiFleet{hc}
				if !tenantSet {
					tenant = "" // the API key's
				}
			} else if dlq, err = dialFleet(cmd.Context(), natsURL, "maker-dlq"); err != nil {
				return err
			}
			defer dlq.Close()
			dls, err := dlq.DeadLetters(cmd.Context(), tenant, allTenants, job, limit)
			if err != nil {
				return clientErr(err)
			}
			if asJSON {
				if dls == nil {
					dls = []schemas.StoredDeadLetter{}
				}
				return writeJSON(e.stdout, dls)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tSUBJECT\tREASON\tDELIVERIES\tAT\tPAYLOAD")
			for _, d := range dls {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", d.DLQSeq, d.Subject, d.Reason, d.Deliveries, d.At.Format(time.RFC3339), payloadKept(d.DeadLetter))
			}
			return tw.Flush()
		},
	}
	natsFlag(list, &natsURL)
	api = addAPIFlags(list)
	list.Flags().StringVar(&listTenant, "tenant", schemas.DefaultTenant, "list this tenant's dead letters (with --api default the API key's; another only for an admin key)")
	list.Flags().BoolVar(&allTenants, "all-tenants", false, "list every tenant's dead letters (an admin's view)")
	list.Flags().StringVar(&job, "job", "", "only this job's dead letters")
	list.Flags().IntVar(&limit, "limit", 1000, "list at most this many")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	replay := &cobra.Command{
		Use:   "replay [SEQ...]",
		Short: "Publish dead letters to their original subjects again (and remove them from the DLQ)",
		Long: `Replays dead letters by their DLQ sequence (see maker dlq list), or with --all every
one that --tenant/--job select. A replayed sample request is answered like any other; if
its step was decided meanwhile, its coordinator counts the answer as a late sample.

A dead letter whose original was too large to keep whole (PAYLOAD "reference" in maker
dlq list) is replayed from the original's stream while the original is still there (it
is checked against the size and SHA-256 kept); otherwise the replay fails and the dead
letter stays.

A dead letter replays only as what dead letters come from: a sample request of the job
its DLQ subject names (<ns>.v1.dlq.<tenant>.<job>), from the samples stream. One whose
original subject is anything else (another tenant's or job's, $KV., $JS., _INBOX.,
another service's or namespace's) is refused, whoever replays it: each refusal is
printed with why, the others are replayed, and the command exits 1.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFilter(tenant, job); err != nil {
				return err
			}
			if all == (len(args) > 0) {
				return usagef("give dead-letter sequences or --all, not both or neither")
			}
			var seqs []uint64
			for _, a := range args {
				n, err := strconv.ParseUint(a, 10, 64)
				if err != nil || n == 0 {
					return usagef("%q is not a dead-letter sequence", a)
				}
				seqs = append(seqs, n)
			}
			f, err := dialFleet(cmd.Context(), natsURL, "maker-dlq")
			if err != nil {
				return err
			}
			defer f.Close()
			if all {
				dls, err := bus.ListDeadLetters(cmd.Context(), f.topo.JS, f.topo.NS, tenant, job, limit)
				if err != nil {
					return err
				}
				for _, d := range dls {
					seqs = append(seqs, d.DLQSeq)
				}
				if len(seqs) == 0 && !asJSON {
					fmt.Fprintln(e.stdout, "no dead letters to replay")
					return nil
				}
			}
			// One replay for the CLI and the API (POST /v1/dlq/replay): the
			// same checks, and a refusal stops none of the others.
			out := bus.ReplayDeadLetters(cmd.Context(), f.topo.JS, f.topo.NS, seqs)
			replayed := out.Replayed
			for _, r := range out.Refused {
				fmt.Fprintf(e.stderr, "refused %d: %s\n", r.Seq, r.Reason)
			}
			var errs []error
			for _, fl := range out.Failed {
				errs = append(errs, fl.Err)
			}
			if !asJSON {
				for _, d := range replayed {
					fmt.Fprintf(e.stdout, "replayed %d to %s\n", d.DLQSeq, d.Subject)
				}
			}
			refused := len(out.Refused)
			if asJSON {
				if replayed == nil {
					replayed = []schemas.StoredDeadLetter{}
				}
				if err := writeJSON(e.stdout, replayed); err != nil {
					return err
				}
			}
			if refused > 0 {
				errs = append(errs, fmt.Errorf("%d of %d dead letters refused (above, with why); they stay in the DLQ (maker dlq list)", refused, len(seqs)))
			}
			if err := errors.Join(errs...); err != nil {
				if errors.Is(err, bus.ErrNoDeadLetter) && len(replayed) == 0 {
					return usageError{err}
				}
				return err
			}
			return nil
		},
	}
	natsFlag(replay, &natsURL)
	replay.Flags().BoolVar(&all, "all", false, "replay every dead letter --tenant/--job select")
	replay.Flags().StringVar(&tenant, "tenant", "", "with --all: only this tenant's")
	replay.Flags().StringVar(&job, "job", "", "with --all: only this job's")
	replay.Flags().IntVar(&limit, "limit", 1000, "with --all: replay at most this many")
	replay.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(list, replay)
	return cmd
}

// payloadKept says how much of the original a dead letter holds: the
// whole ("N B"), or, for an original too large to keep, a reference to it
// ("reference: N B sha256 H…, first M B kept").
func payloadKept(d schemas.DeadLetter) string {
	size := d.Size
	if size == 0 { // stored by an older release: always whole
		size = len(d.Data)
	}
	if !d.Truncated {
		return fmt.Sprintf("%d B", size)
	}
	return fmt.Sprintf("reference: %d B sha256 %.12s…, first %d B kept", size, d.SHA256, len(d.Data))
}
