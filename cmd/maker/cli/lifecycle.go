package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/client/httpapi"
	"github.com/makerfleet/makerfleet/schemas"
)

// clientErr marks the errors a client command gets for bad input (on
// NATS, or the API's 400, 409, 413 and 422: apiErr). A job with no report
// yet is no bad input, though the API's 409 says conflict too.
func clientErr(err error) error {
	if errors.Is(err, client.ErrNotFinished) {
		return err
	}
	if errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrFinished) || errors.Is(err, client.ErrNotWaiting) ||
		errors.Is(err, client.ErrConflict) {
		return usageError{err}
	}
	return err
}

// notFoundIn names the tenant an unknown job was looked for in ("": the
// API key's), and where else to look: the commonest cause is a job
// submitted under another tenant.
func notFoundIn(err error, tenant, job string) error {
	if !errors.Is(err, client.ErrNotFound) {
		return err
	}
	where := "tenant " + tenant
	if tenant == "" {
		where = "the API key's tenant"
	}
	return fmt.Errorf("%w (looked in %s; a job of another tenant is TENANT/%s or --tenant TENANT, and maker jobs list --all-tenants lists every tenant's)", err, where, job)
}

// jobCommand builds a command acting on one job, through the fleet's
// NATS or its HTTP API (--api); run gets the job's tenant ("" with --api
// when no tenant is named: the API key's) and id.
func jobCommand(e *env, use, short string, run func(ctx context.Context, c jobsPort, tenant, job string, asJSON bool) error) *cobra.Command {
	var natsURL, tenant string
	var asJSON bool
	var api *apiFlags
	cmd := &cobra.Command{
		Use:   use + " JOB",
		Short: short,
		Args:  exactArgs(1, "JOB (a job id, or tenant/job)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			hc, err := api.client(cmd)
			if err != nil {
				return err
			}
			tenantSet := cmd.Flags().Changed("tenant")
			t, j, err := jobRef(args[0], tenant, tenantSet)
			if err != nil {
				return err
			}
			c, err := openJobs(cmd, hc, natsURL, "maker-"+use, t)
			if err != nil {
				return err
			}
			defer c.Close()
			if hc != nil && !tenantSet && !strings.Contains(args[0], "/") {
				t = "" // the API key's
			}
			return clientErr(notFoundIn(run(cmd.Context(), c, t, j, asJSON), t, j))
		},
	}
	natsFlag(cmd, &natsURL)
	api = addAPIFlags(cmd)
	cmd.Flags().StringVar(&tenant, "tenant", schemas.DefaultTenant, "tenant of the job (a JOB of the form tenant/id must name the same; with --api default the API key's, another only for an admin key)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// fleetPort is the fleet of the job and batch commands.
type fleetPort interface {
	jobsPort
	batchesPort
}

// openJobs returns the fleet through the HTTP API when hc is set (--api),
// else connects to its NATS as dialClient does, in tenant.
func openJobs(cmd *cobra.Command, hc *httpapi.Client, natsURL, name, tenant string) (fleetPort, error) {
	if hc != nil {
		return apiFleet{hc}, nil
	}
	return dialClient(cmd.Context(), natsURL, name, tenant)
}

func statusCmd(e *env) *cobra.Command {
	cmd := jobCommand(e, "status", "Print a job's state and progress", func(ctx context.Context, c jobsPort, tenant, job string, asJSON bool) error {
		st, err := c.Status(ctx, tenant, job)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(e.stdout, st)
		}
		hook, err := c.Webhook(ctx, tenant, job)
		if err != nil {
			return err
		}
		defer printWebhook(e.stdout, hook)
		if st.State == schemas.StateQueued {
			// A queued job has no figures yet: say why it waits.
			why, err := c.QueuedReason(ctx, tenant, job)
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
	cmd.Long = "Prints a job's state and progress (--json: its job_status).\n" + jobHelp
	return cmd
}

// printWebhook prints a job's webhook line under its status (nothing for
// a job that names none).
func printWebhook(w io.Writer, v *schemas.WebhookView) {
	if v == nil {
		return
	}
	fmt.Fprintf(w, "  webhook %s: %s", v.URL, v.State)
	if n := len(v.Attempts); n > 0 {
		a := v.Attempts[n-1]
		fmt.Fprintf(w, " after %d attempt(s); last at %s", n, a.At.UTC().Format(time.RFC3339))
		if a.StatusCode != 0 {
			fmt.Fprintf(w, ", status %d", a.StatusCode)
		}
		if a.Error != "" {
			fmt.Fprintf(w, ": %s", a.Error)
		}
		if a.NextRetryAt != nil {
			fmt.Fprintf(w, "; next at %s", a.NextRetryAt.UTC().Format(time.RFC3339))
		}
	}
	fmt.Fprintln(w)
}

// jobHelp ends the Long text of the commands on one job.
const jobHelp = `
JOB is a job id in --tenant, or tenant/id; a tenant/id naming another tenant than a
--tenant given is refused.
` + apiHelp

func resultCmd(e *env) *cobra.Command {
	cmd := jobCommand(e, "result", "Print a finished job's report", func(ctx context.Context, c jobsPort, tenant, job string, asJSON bool) error {
		rep, err := c.Result(ctx, tenant, job)
		if err != nil {
			return err
		}
		return printReport(e.stdout, rep, asJSON)
	})
	cmd.Long = "Prints a finished job's report (--json: its job_report); a job without one yet is refused, naming its state.\n" + jobHelp
	return cmd
}

// controlCmd builds pause, resume and cancel: the request goes to the
// fleet's coordinators (client.Client.Pause and so on, or the API's
// routes), which check it against the job's state; when none runs, the
// registry is written directly with the same checks.
func controlCmd(e *env, use, action, short string) *cobra.Command {
	cmd := jobCommand(e, use, short, func(ctx context.Context, c jobsPort, tenant, job string, asJSON bool) error {
		out, err := c.Control(ctx, tenant, job, action)
		if err != nil {
			return err
		}
		// Asking for what already holds changes nothing: say so rather
		// than promise an effect at the next step boundary.
		note := fmt.Sprintf("%s asked (the job is %s; it takes effect at the next step boundary)", use, out.State)
		if !out.Changed {
			note = alreadyNote(out.State, out.Control)
		}
		if asJSON {
			return writeJSON(e.stdout, map[string]string{"tenant": out.Tenant, "job_id": out.ID, "control": out.Control, "state": out.State})
		}
		fmt.Fprintf(e.stdout, "%s/%s: %s\n", out.Tenant, out.ID, note)
		return nil
	})
	cmd.Long = short + `.

The request goes to the fleet's coordinators (with authorization on, only the job's tenant
and the admin may send it), which check it against the job's record: an unknown job, a
finished one, or a pause or resume of a job being cancelled is refused; asking for what
already holds changes nothing. When no coordinator runs, the record is written directly,
with the same checks (the admin's, maker serve's, or any client's on a server without
authorization).
` + jobHelp
	return cmd
}

// alreadyNote says how a job already is what its control asks for (the
// request changed nothing).
func alreadyNote(state, control string) string {
	switch {
	case control == schemas.ControlPause && state == schemas.StatePaused:
		return "already paused"
	case control == schemas.ControlPause && state == schemas.StateBudgetExhausted:
		return "already paused (budget exhausted: raise it with maker budget set, then resume)"
	case control == schemas.ControlPause:
		return fmt.Sprintf("pause already asked (the job is %s; it pauses at the next step boundary)", state)
	case control == schemas.ControlRun && state == schemas.StateRunning:
		return "already running"
	case control == schemas.ControlRun && state == schemas.StatePaused:
		return "resume already asked (the job is paused; a coordinator picks it up where it stopped)"
	case control == schemas.ControlRun:
		return fmt.Sprintf("not paused (the job is %s)", state)
	default:
		return fmt.Sprintf("cancel already asked (the job is %s; it ends at the next step boundary)", state)
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
	var api *apiFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's registered jobs with their state (--all-tenants: every tenant's)",
		Long: `Lists a tenant's registered jobs, oldest submission first: STATE is where each stands,
CONTROL what it was last asked (run, pause or cancel).
` + apiHelp + `
--all-tenants over the API needs an admin key.`,
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
			if allTenants {
				tenant = ""
			} else if err := checkTenant(tenant); err != nil {
				return err
			}
			c, err := openJobs(cmd, hc, natsURL, "maker-jobs", schemas.DefaultTenant)
			if err != nil {
				return err
			}
			defer c.Close()
			if hc != nil && !tenantSet {
				tenant = "" // the API key's
			}
			rows, err := c.List(cmd.Context(), tenant, allTenants)
			if err != nil {
				return clientErr(err)
			}
			slices.SortFunc(rows, func(a, b jobRow) int {
				if c := a.SubmittedAt.Compare(b.SubmittedAt); c != 0 {
					return c
				}
				return strings.Compare(a.Tenant+"/"+a.JobID, b.Tenant+"/"+b.JobID)
			})
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
	api = addAPIFlags(list)
	list.Flags().StringVar(&tenant, "tenant", schemas.DefaultTenant, "list this tenant's jobs (with --api default the API key's; another only for an admin key)")
	list.Flags().BoolVar(&allTenants, "all-tenants", false, "list every tenant's jobs (an admin's view: the admin's NATS identity, or an admin API key)")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(list)
	cmd.AddCommand(purgeCmd(e)) // purge.go
	return cmd
}

func decideCmd(e *env) *cobra.Command {
	var (
		step    int64
		key, by string
		stepSet bool
	)
	cmd := jobCommand(e, "decide", "Decide a step the fleet could not settle (the job paused for a person), and run on", func(ctx context.Context, c jobsPort, tenant, job string, asJSON bool) error {
		if !stepSet || key == "" {
			return usagef("--step and --vote are required")
		}
		out, err := c.Decide(ctx, tenant, job, client.Decision{Step: step, VoteKey: key, By: by})
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(e.stdout, out.Decision)
		}
		who := by
		if out.Decision != nil {
			who = out.Decision.By
		}
		fmt.Fprintf(e.stdout, "%s/%s: step %d will be decided as %q by %s, and the job runs on\n", out.Tenant, out.ID, step, key, who)
		return nil
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
registry directly, with the same checks. With --api, who decides is the API key's to say
(--by is refused).
` + jobHelp
	cmd.Flags().Int64Var(&step, "step", 0, "the step to decide")
	cmd.Flags().StringVar(&key, "vote", "", "the step's answer, as the task's vote key")
	cmd.Flags().StringVar(&by, "by", envOr("USER", "someone"), "who decides (recorded in the journal; not with --api, where the API key says)")
	cmd.PreRunE = func(c *cobra.Command, _ []string) error {
		stepSet = c.Flags().Changed("step")
		if c.Flags().Lookup("api").Value.String() != "" {
			return refuseWithAPI(c, "the API key says who decides", "by")
		}
		return nil
	}
	return cmd
}
