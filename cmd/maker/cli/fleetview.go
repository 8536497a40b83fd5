package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/presence"
	"github.com/makerfleet/makerfleet/schemas"
)

// fleetViewPort is maker fleet's fleet: the view from the presence bucket
// and the queues (NATS), or GET /v1/fleet (the API, an admin key).
type fleetViewPort interface {
	Fleet(ctx context.Context) (schemas.FleetView, error)
	Close()
}

var (
	_ fleetViewPort = (*fleetConn)(nil)
	_ fleetViewPort = apiFleet{}
)

// Fleet reads the view over NATS (presence.View).
func (f *fleetConn) Fleet(ctx context.Context) (schemas.FleetView, error) {
	return presence.View(ctx, f.topo.JS, f.topo.NS, time.Now())
}

// Fleet reads the view from the API.
func (a apiFleet) Fleet(ctx context.Context) (schemas.FleetView, error) { return a.c.Fleet(ctx) }

func fleetViewCmd(e *env) *cobra.Command {
	var (
		natsURL string
		asJSON  bool
		watch   time.Duration
	)
	var api *apiFlags
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Show the fleet: live voters (model, concurrency, in flight, counters), coordinators and their jobs, queue lag",
		Long: `Shows the fleet as its voters and coordinators describe themselves in their
presence records (renewed every 5 s, gone 30 s after a process stops), and the work
queues as JetStream counts them: LAG is the messages not yet delivered (sample
requests no voter has taken), ACK PENDING those in a voter's or coordinator's hands.
SAMPLES/S is each voter's rate between its last two records. A record is its
writer's claim: shown, never acted on.
` + apiHelp + `
Over the API it needs an admin key (GET /v1/fleet).`,
		Example: `  maker fleet
  maker fleet --json
  maker fleet --watch 5s
  maker fleet --api http://127.0.0.1:8090 --api-key $MAKER_ADMIN_KEY`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hc, err := api.client(cmd)
			if err != nil {
				return err
			}
			if watch < 0 || watch > 0 && watch < time.Second {
				return usagef("--watch must be at least 1s, got %v", watch)
			}
			var port fleetViewPort
			if hc != nil {
				port = apiFleet{hc}
			} else if port, err = dialFleet(cmd.Context(), natsURL, "maker-fleet"); err != nil {
				return err
			}
			defer port.Close()
			for {
				ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
				v, err := port.Fleet(ctx)
				cancel()
				if err != nil {
					return clientErr(err)
				}
				if asJSON {
					err = writeJSON(e.stdout, v)
				} else {
					err = printFleetView(e.stdout, v)
				}
				if err != nil || watch == 0 {
					return err
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(watch):
				}
				if !asJSON {
					fmt.Fprintln(e.stdout)
				}
			}
		},
	}
	natsFlag(cmd, &natsURL)
	api = addAPIFlags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the view as JSON (schemas.FleetView, as GET /v1/fleet answers)")
	cmd.Flags().DurationVar(&watch, "watch", 0, "print the view again every this long until interrupted (e.g. 5s)")
	return cmd
}

// printFleetView prints v as tables: the totals, the voters, the
// coordinators, the tenants and the queues.
func printFleetView(w io.Writer, v schemas.FleetView) error {
	t := v.Totals
	fmt.Fprintf(w, "fleet at %s: %d voters (concurrency %d, in flight %d, %.1f samples/s), %d coordinators (%d jobs)\n",
		v.At.Format(time.RFC3339), t.Voters, t.Concurrency, t.InFlight, t.SamplesPerS, t.Coordinators, t.Jobs)
	fmt.Fprintf(w, "since start: %d samples answered, %d red flags, %d provider errors (%d rate-limited, 429), %d refused",
		t.SamplesAnswered, t.RedFlags, t.ProviderErrors, t.RateLimited, t.Refused)
	if v.Skipped > 0 {
		fmt.Fprintf(w, "; %d presence records skipped (invalid)", v.Skipped)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nVOTER\tHOST\tMODELS\tCONCURRENCY\tIN FLIGHT\tANSWERED\tRED FLAGS\tERRORS\t429\tREFUSED\tSAMPLES/S\tUP")
	for _, p := range v.Voters {
		models := strings.Join(p.Models, ",")
		if len(p.Deployments) > 0 {
			models += " (" + strings.Join(p.Deployments, ",") + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\n", p.ID, dash(p.Host), dash(models), p.Concurrency, p.InFlight,
			p.SamplesAnswered, p.RedFlags, p.ProviderErrors, p.RateLimited, p.Refused, p.SamplesPerS, since(v.At, p.Started))
	}
	fmt.Fprintln(tw, "\nCOORDINATOR\tHOST\tJOBS\tUP")
	for _, c := range v.Coordinators {
		jobs := make([]string, 0, len(c.Jobs)+1)
		for _, j := range c.Jobs {
			jobs = append(jobs, fmt.Sprintf("%s/%s %s step %d", j.Tenant, j.ID, j.State, j.Step))
		}
		if c.JobsMore > 0 {
			jobs = append(jobs, fmt.Sprintf("+%d more", c.JobsMore))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.ID, dash(c.Host), dash(strings.Join(jobs, "; ")), since(v.At, c.Started))
	}
	fmt.Fprintln(tw, "\nTENANT\tRUNNING JOBS\tIN FLIGHT")
	for _, ti := range v.Tenants {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", ti.Tenant, ti.Jobs, ti.InFlight)
	}
	fmt.Fprintln(tw, "\nQUEUE\tSTREAM\tCONSUMER\tMESSAGES\tLAG\tACK PENDING\tREDELIVERED\tWAITING")
	for _, q := range v.Queues {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", q.Name, q.Stream, dash(q.Consumer), q.Messages, q.NumPending, q.AckPending, q.Redelivered, q.Waiting)
	}
	return tw.Flush()
}

// since is how long ago t was, at now, to the second.
func since(now, t time.Time) string {
	if t.IsZero() || now.Before(t) {
		return "-"
	}
	return now.Sub(t).Truncate(time.Second).String()
}
