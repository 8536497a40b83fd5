package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/schemas"
)

// fleetConn is a connection to a running fleet and its topology, for
// the operators' commands (dlq); the job commands use the public client
// (dialClient).
type fleetConn struct {
	nc   *nats.Conn
	topo *bus.Topology
}

func (f *fleetConn) Close() { f.nc.Close() }

// dialFleet connects to the fleet at natsURL, within a bounded time: a
// client command must not hang on a server that does not answer. It binds
// the fleet's topology without creating it: a client command run against
// the wrong server must not leave a fleet's streams on it.
func dialFleet(ctx context.Context, natsURL, name string) (*fleetConn, error) {
	nc, err := bus.Connect(natsURL, name, natsAuth(ctx))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	topo, err := bus.Open(ctx, js, bus.Config{StartupWait: 10 * time.Second})
	if err != nil {
		nc.Close()
		if errors.Is(err, bus.ErrNoFleet) {
			return nil, fmt.Errorf("%s: %w", bus.RedactURL(natsURL), err)
		}
		return nil, err
	}
	return &fleetConn{nc: nc, topo: topo}, nil
}

// jobClient is the public client (package client) on a connection of
// the command's own.
type jobClient struct {
	*client.Client
	nc *nats.Conn
}

func (c *jobClient) Close() { c.nc.Close() }

// clientOptions are the client options for the running command's NATS
// identity: a tenant's identity may only queue its own jobs (and not
// read the coordinators' leases).
func clientOptions(ctx context.Context, tenant string) []client.Option {
	opts := []client.Option{client.WithTenant(tenant)}
	if _, ok := auth.TenantOf(natsAuth(ctx).IdentityName()); ok {
		opts = append(opts, client.WithIntakeOnly())
	}
	return opts
}

// dialClient connects to the fleet at natsURL as dialFleet does (bounded,
// creating nothing) and returns the public client on it, in tenant.
func dialClient(ctx context.Context, natsURL, name, tenant string) (*jobClient, error) {
	nc, err := bus.Connect(natsURL, name, natsAuth(ctx))
	if err != nil {
		return nil, err
	}
	c, err := client.New(nc, clientOptions(ctx, tenant)...)
	if err == nil {
		err = c.CheckFleet(ctx)
	}
	if err != nil {
		nc.Close()
		if errors.Is(err, client.ErrNoFleet) {
			return nil, fmt.Errorf("%s: %w", bus.RedactURL(natsURL), err)
		}
		return nil, err
	}
	return &jobClient{Client: c, nc: nc}, nil
}

// jobRef reads a JOB argument: "job" (in --tenant) or "tenant/job".
// tenantSet says --tenant was given: then a tenant/job naming another
// tenant is refused rather than silently taking the job's tenant.
func jobRef(arg, tenant string, tenantSet bool) (string, string, error) {
	if strings.Count(arg, "/") > 1 {
		return "", "", usagef("invalid JOB %q: JOB is id or tenant/id", arg)
	}
	if t, j, ok := strings.Cut(arg, "/"); ok {
		if tenantSet && t != tenant {
			return "", "", usagef("JOB %q names tenant %q, but --tenant is %q: give the job id alone, or the same tenant", arg, t, tenant)
		}
		tenant, arg = t, j
	}
	if err := checkTenant(tenant); err != nil {
		return "", "", err
	}
	if err := checkJobID(arg); err != nil {
		return "", "", err
	}
	return tenant, arg, nil
}

// checkTenant and checkJobID refuse a malformed id with a message for a
// person; schemas' own errors are worded for messages on the wire.
func checkTenant(t string) error {
	if schemas.ValidTenant(t) != nil {
		return usagef("invalid tenant %q: want %s", t, schemas.TenantRule)
	}
	return nil
}

func checkJobID(id string) error {
	if schemas.ValidJobID(id) != nil {
		return usagef("invalid job id %q: want %s", id, schemas.JobIDRule)
	}
	return nil
}

// clientErr marks the errors a client command gets for bad input.
func clientErr(err error) error {
	if errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrFinished) || errors.Is(err, client.ErrNotWaiting) {
		return usageError{err}
	}
	return err
}

// jobCommand builds a command acting on one job, through the public
// client; run gets the job as ref, tenant/job.
func jobCommand(e *env, use, short string, run func(ctx context.Context, c *jobClient, ref, tenant, job string, asJSON bool) error) *cobra.Command {
	var natsURL, tenant string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   use + " JOB",
		Short: short,
		Args:  exactArgs(1, "JOB (a job id, or tenant/job)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, j, err := jobRef(args[0], tenant, cmd.Flags().Changed("tenant"))
			if err != nil {
				return err
			}
			c, err := dialClient(cmd.Context(), natsURL, "maker-"+use, t)
			if err != nil {
				return err
			}
			defer c.Close()
			return clientErr(run(cmd.Context(), c, t+"/"+j, t, j, asJSON))
		},
	}
	natsFlag(cmd, &natsURL)
	cmd.Flags().StringVar(&tenant, "tenant", schemas.DefaultTenant, "tenant of the job (a JOB of the form tenant/id must name the same)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// exactArgs is cobra.ExactArgs with a usage error that says what is
// expected.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("expected %s, got %d arguments", what, len(args))
		}
		return nil
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func statusCmd(e *env) *cobra.Command {
	return jobCommand(e, "status", "Print a job's state and progress", func(ctx context.Context, c *jobClient, ref, _, _ string, asJSON bool) error {
		st, err := c.Status(ctx, ref)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(e.stdout, st)
		}
		if st.State == schemas.StateQueued {
			// A queued job has no figures yet: say why it waits.
			why, err := c.QueuedReason(ctx, ref)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s/%s: queued: %s", st.Tenant, st.JobID, why)
			if st.Control != "" {
				fmt.Fprintf(e.stdout, " (%s asked)", st.Control)
			}
			fmt.Fprintln(e.stdout)
			return nil
		}
		fmt.Fprintf(e.stdout, "%s/%s: %s", st.Tenant, st.JobID, st.State)
		if st.Control != "" {
			fmt.Fprintf(e.stdout, " (%s asked)", st.Control)
		}
		fmt.Fprintf(e.stdout, ", step %d of %d (%.1f%%), %d samples, %d errors", st.Steps, st.TotalSteps, 100*st.Progress, st.Samples, st.Errors)
		switch st.Rung {
		case schemas.RungStrongerModel:
			fmt.Fprintf(e.stdout, ", step %d escalated to the stronger model", st.Steps)
		case schemas.RungPanel:
			fmt.Fprintf(e.stdout, ", step %d with the judge's panel", st.Steps)
		}
		if st.Coordinator != "" {
			fmt.Fprintf(e.stdout, ", on %s", st.Coordinator)
		}
		if st.Reason != "" {
			fmt.Fprintf(e.stdout, ": %s", st.Reason)
		}
		fmt.Fprintln(e.stdout)
		return nil
	})
}

func resultCmd(e *env) *cobra.Command {
	return jobCommand(e, "result", "Print a finished job's report", func(ctx context.Context, c *jobClient, ref, _, _ string, asJSON bool) error {
		rep, err := c.Result(ctx, ref)
		if err != nil {
			return err
		}
		return printReport(e.stdout, rep, asJSON)
	})
}

// controlCmd builds pause, resume and cancel: the request goes to the
// fleet's coordinators (client.Client.Pause and so on), which check it
// against the job's state; when none runs, the registry is written
// directly with the same checks.
func controlCmd(e *env, use, action, short string) *cobra.Command {
	control := map[string]func(*client.Client, context.Context, string) (client.Outcome, error){
		schemas.ActionPause: (*client.Client).Pause, schemas.ActionResume: (*client.Client).Resume,
		schemas.ActionCancel: (*client.Client).Cancel,
	}[action]
	cmd := jobCommand(e, use, short, func(ctx context.Context, c *jobClient, ref, tenant, job string, asJSON bool) error {
		out, err := control(c.Client, ctx, ref)
		if err != nil {
			return err
		}
		rec := out.Record
		// Asking for what already holds changes nothing: say so rather
		// than promise an effect at the next step boundary.
		note := fmt.Sprintf("%s asked (the job is %s; it takes effect at the next step boundary)", use, rec.State)
		if !out.Changed {
			note = alreadyNote(rec)
		}
		if asJSON {
			return writeJSON(e.stdout, map[string]string{"tenant": tenant, "job_id": job, "control": rec.Control, "state": rec.State})
		}
		fmt.Fprintf(e.stdout, "%s/%s: %s\n", tenant, job, note)
		return nil
	})
	cmd.Long = short + `.

The request goes to the fleet's coordinators (with authorization on, only the job's tenant
and the admin may send it), which check it against the job's record: an unknown job, a
finished one, or a pause or resume of a job being cancelled is refused; asking for what
already holds changes nothing. When no coordinator runs, the record is written directly,
with the same checks (the admin's, or any client's on a server without authorization).

JOB is a job id in --tenant, or tenant/id; a tenant/id naming another tenant than a
--tenant given is refused.`
	return cmd
}

// alreadyNote says how a job already is what its control asks for (the
// request changed nothing).
func alreadyNote(rec schemas.JobRecord) string {
	switch {
	case rec.Control == schemas.ControlPause && rec.State == schemas.StatePaused:
		return "already paused"
	case rec.Control == schemas.ControlPause && rec.State == schemas.StateBudgetExhausted:
		return "already paused (budget exhausted: raise it with maker budget set, then resume)"
	case rec.Control == schemas.ControlPause:
		return fmt.Sprintf("pause already asked (the job is %s; it pauses at the next step boundary)", rec.State)
	case rec.Control == schemas.ControlRun && rec.State == schemas.StateRunning:
		return "already running"
	case rec.Control == schemas.ControlRun && rec.State == schemas.StatePaused:
		return "resume already asked (the job is paused; a coordinator picks it up where it stopped)"
	case rec.Control == schemas.ControlRun:
		return fmt.Sprintf("not paused (the job is %s)", rec.State)
	default:
		return fmt.Sprintf("cancel already asked (the job is %s; it ends at the next step boundary)", rec.State)
	}
}

func pauseCmd(e *env) *cobra.Command {
	return controlCmd(e, "pause", schemas.ActionPause, "Pause a job at its next step boundary (resume picks it up there)")
}

func resumeCmd(e *env) *cobra.Command {
	return controlCmd(e, "resume", schemas.ActionResume, "Resume a paused job")
}

func cancelCmd(e *env) *cobra.Command {
	return controlCmd(e, "cancel", schemas.ActionCancel, "Cancel a job at its next step boundary; it ends with a cancelled report")
}

func jobsCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{Use: "jobs", Short: "List and inspect the fleet's jobs"})
	var natsURL, tenant string
	var asJSON, allTenants bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's registered jobs with their state (--all-tenants: every tenant's)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if allTenants && cmd.Flags().Changed("tenant") {
				return usagef("give --tenant or --all-tenants, not both")
			}
			if allTenants {
				tenant = ""
			} else if err := checkTenant(tenant); err != nil {
				return err
			}
			c, err := dialClient(cmd.Context(), natsURL, "maker-jobs", schemas.DefaultTenant)
			if err != nil {
				return err
			}
			defer c.Close()
			recs, err := c.List(cmd.Context(), client.ListOptions{Tenant: tenant, AllTenants: allTenants})
			if err != nil {
				return err
			}
			type row struct {
				Tenant      string    `json:"tenant"`
				JobID       string    `json:"job_id"`
				Task        string    `json:"task"`
				K           int       `json:"k"`
				State       string    `json:"state"`
				Control     string    `json:"control"`
				SubmittedAt time.Time `json:"submitted_at"`
			}
			rows := make([]row, 0, len(recs))
			for _, r := range recs {
				rows = append(rows, row{r.Tenant, r.JobID, r.Spec.Task, r.Spec.K, r.State, r.Control, r.Spec.SubmittedAt})
			}
			if asJSON {
				return writeJSON(e.stdout, rows)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tJOB\tTASK\tK\tSTATE\tCONTROL\tSUBMITTED")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Tenant, r.JobID, r.Task, r.K, r.State, r.Control, r.SubmittedAt.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	natsFlag(list, &natsURL)
	list.Flags().StringVar(&tenant, "tenant", schemas.DefaultTenant, "list this tenant's jobs")
	list.Flags().BoolVar(&allTenants, "all-tenants", false, "list every tenant's jobs (an admin's view: a tenant's identity may read only its own)")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(list)
	cmd.AddCommand(purgeCmd(e)) // purge.go
	return cmd
}

func decideCmd(e *env) *cobra.Command {
	var (
		step     int64
		key, by  string
		stepSet  bool
		decision = func(ctx context.Context, c *jobClient, ref, tenant, job string, asJSON bool) error {
			out, err := c.Decide(ctx, ref, client.Decision{Step: step, VoteKey: key, By: by})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, out.Record.Decision)
			}
			fmt.Fprintf(e.stdout, "%s/%s: step %d will be decided as %q by %s, and the job runs on\n", tenant, job, step, key, by)
			return nil
		}
	)
	cmd := jobCommand(e, "decide", "Decide a step the fleet could not settle (the job paused for a person), and run on", func(ctx context.Context, c *jobClient, ref, tenant, job string, asJSON bool) error {
		if !stepSet || key == "" {
			return usagef("--step and --vote are required")
		}
		return decision(ctx, c, ref, tenant, job, asJSON)
	})
	cmd.Long = `Records a person's answer for one step: the vote key, in the task's canonical form (see
the step's tally in maker status / the journal). The job's coordinator journals it as an
arbiter decision when it reaches that step, instead of sampling it, and the job runs on.
An answer the task cannot take pauses the job again.

Only a step the fleet could not settle takes a person's answer: the step the job is at,
escalated to the judge's panel (the job paused for a person, or waiting for the panel).
Any other step is refused, and nothing changes: a healthy step, one decided already, one
not reached yet. The answer goes to the fleet's coordinators (with authorization on, only
an approver or the admin may send it); when no coordinator runs, it is written to the job
registry directly, with the same checks.`
	cmd.Flags().Int64Var(&step, "step", 0, "the step to decide")
	cmd.Flags().StringVar(&key, "vote", "", "the step's answer, as the task's vote key")
	cmd.Flags().StringVar(&by, "by", envOr("USER", "someone"), "who decides (recorded in the journal)")
	cmd.PreRun = func(c *cobra.Command, _ []string) { stepSet = c.Flags().Changed("step") }
	return cmd
}
