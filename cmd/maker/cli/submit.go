package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/jobs"
	"github.com/makerfleet/makerfleet/schemas"
)

func submitCmd(e *env) *cobra.Command {
	var (
		jf      jobFlags
		natsURL string
		wait    bool
		asJSON  bool
		quiet   bool
		timeout time.Duration
		// queuedAfter: with --wait, how long a job may stay queued without
		// a status update before submit says so
		queuedAfter time.Duration
		esc         schemas.EscalationPolicy
		// calModel: the voters' model, whose stored calibration gives p
		calModel string
		// strongerPrice: a price not given is the job's
		strongerPrice schemas.Pricing
		// hook: the job's webhook URL
		hook string
	)
	var api *apiFlags
	cmd := &cobra.Command{
		Use:   "submit",
		Short: "Submit a job to a running fleet (and with --wait, print its report)",
		Long: `Checks the job completely (task, params, every field; k chosen from --p and --target
when --k is not given) and queues it; nothing is sent when it is refused. With --wait it
follows the job's progress on stderr and prints its report (--json: the job_report).
` + apiHelp + `
Over the API the job runs as the API key's tenant (--tenant, when given, must be it), and
--calibration-model is refused: stored calibrations are on the fleet's bus (give --p).`,
		Example: `  maker submit --nats nats://127.0.0.1:4222 --task hanoi --disks 8 --k 3 --wait --json
  maker submit --api http://127.0.0.1:8000 --api-key "$KEY" --task hanoi --disks 8 --k 3 --wait`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hc, err := api.client(cmd)
			if err != nil {
				return err
			}
			if hc != nil {
				if err := refuseWithAPI(cmd, "stored calibrations are on the fleet's bus, which --api never dials; give --p", "calibration-model"); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			// A built-in task is checked before anything is sent; a task
			// spec is looked up in the fleet's task registry, which is only
			// opened: a refused job leaves nothing on the server, and a
			// server without a fleet has no spec registered.
			var tasks jobs.Tasks = builtinTasks()
			var c jobsPort
			open := func() (jobsPort, error) {
				if hc != nil {
					return apiFleet{hc}, nil
				}
				// The spec names its tenant, checked with the other flags.
				return connectClient(cmd.Context(), natsURL, "maker-submit", schemas.DefaultTenant)
			}
			if !jf.isBuiltin() {
				if c, err = open(); err != nil {
					return err
				}
				defer c.Close()
				// Built-ins only on a server without a fleet: the spec is
				// reported unknown.
				if tasks, err = c.Tasks(ctx, jf.task); err != nil {
					return err
				}
			}
			if hc == nil {
				jf.calibrated = storedCalibration(natsURL, calModel)
			}
			spec, _, err := jf.spec(cmd, schemas.DefaultP, "--p", 1, tasks)
			if err != nil {
				return err
			}
			if hook != "" {
				if err := schemas.ValidWebhookURL(hook); err != nil {
					return usagef("--webhook: %v", err)
				}
				spec.Webhook = hook
			}
			notePFrom(e.stderr, &jf, spec)
			if esc.StrongerModel != "" || esc.Panel {
				e := esc
				in, out := cmd.Flags().Changed("stronger-input-price"), cmd.Flags().Changed("stronger-output-price")
				if in || out {
					p := strongerPrice
					if !in {
						p.InputUSDPerMTok = jf.inputPrice
					}
					if !out {
						p.OutputUSDPerMTok = jf.outputPrice
					}
					e.StrongerPricing = &p
				}
				spec.Escalation = &e
				if err := spec.Validate(); err != nil {
					return usageError{err}
				}
			} else if cmd.Flags().Changed("stronger-samples") || cmd.Flags().Changed("min-confidence") ||
				cmd.Flags().Changed("stronger-input-price") || cmd.Flags().Changed("stronger-output-price") {
				return usagef("--stronger-samples, --stronger-*-price and --min-confidence need --stronger-model or --panel")
			}
			if queuedAfter <= 0 {
				return usagef("--queued-notice must be > 0")
			}
			if c == nil {
				if c, err = open(); err != nil {
					return err
				}
				defer c.Close()
			}
			send := spec
			if hc != nil && !cmd.Flags().Changed("tenant") {
				send.Tenant = "" // the API key's
			}
			sub, err := c.Submit(ctx, send)
			if errors.Is(err, client.ErrConflict) {
				return usageError{err}
			}
			if err != nil {
				return clientErr(err)
			}
			spec.Tenant = sub.Tenant
			if sub.Duplicate && (wait || !asJSON) { // --json alone says "duplicate": true
				note := ""
				if wait {
					note = "; waiting for its report"
				}
				fmt.Fprintf(e.stderr, "duplicate: nothing ran: %s/%s was submitted before with the same spec%s\n", spec.Tenant, spec.JobID, note)
			}
			if !wait {
				if asJSON {
					return json.NewEncoder(e.stdout).Encode(sub)
				}
				fmt.Fprintln(e.stdout, sub.JobID)
				return nil
			}
			if !quiet && !sub.Duplicate {
				fmt.Fprintf(e.stderr, "submitted %s\n", describe(spec))
			}
			rep, err := waitReport(ctx, e.stderr, c, spec.Tenant, spec.JobID, progressFor(e.stderr, quiet), queuedAfter, natsURL)
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) && timeout > 0 {
					return fmt.Errorf("job %s did not finish within --timeout %s (it keeps running; maker result %s/%s prints its report once it has one)", spec.JobID, timeout, spec.Tenant, spec.JobID)
				}
				return fmt.Errorf("waiting for job %s: %w", spec.JobID, err)
			}
			if err := jobs.CheckReport(spec, rep); err != nil {
				return usageError{err}
			}
			return printReport(e.stdout, rep, asJSON)
		},
	}
	natsFlag(cmd, &natsURL)
	api = addAPIFlags(cmd)
	addJobFlags(cmd, &jf, "the --calibration-model's stored calibration, else 0.95")
	fl := cmd.Flags()
	fl.StringVar(&hook, "webhook", "", "POST the job's end to this http(s) URL, signed with the tenant's secret (maker serve delivers it; docs/api.md, Webhooks)")
	fl.StringVar(&calModel, "calibration-model", envOr("MAKER_MODEL", ""), "the model the fleet's voters call: without --p, p and the valid fraction come from its stored calibration of the task (maker calibrate) [$MAKER_MODEL]")
	fl.BoolVar(&wait, "wait", false, "wait for the job to finish and print its report")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress")
	fl.DurationVar(&timeout, "timeout", 0, "give up waiting after this long (default: no limit)")
	fl.DurationVar(&queuedAfter, "queued-notice", 10*time.Second, "with --wait: say so when the job is still queued after this long without progress")
	_ = fl.MarkHidden("queued-notice") // for tests; the default suits people
	fl.StringVar(&esc.StrongerModel, "stronger-model", "", "escalation: a step that spends --max-samples without a decision is voted on again by this model")
	fl.IntVar(&esc.StrongerSamples, "stronger-samples", schemas.DefaultStrongerSamples, "escalation: the stronger model's sample cap per step")
	fl.Float64Var(&strongerPrice.InputUSDPerMTok, "stronger-input-price", 0, "escalation: the stronger model's price, USD per million input tokens (default: --input-price)")
	fl.Float64Var(&strongerPrice.OutputUSDPerMTok, "stronger-output-price", 0, "escalation: the stronger model's price, USD per million output tokens (default: --output-price)")
	fl.BoolVar(&esc.Panel, "panel", false, "escalation: then let the judge's break-glass panel arbitrate (needs a running maker judge)")
	fl.Float64Var(&esc.MinConfidence, "min-confidence", schemas.DefaultMinConfidence, "escalation: the least judge confidence that decides a step; below it the job pauses for a person")
	return cmd
}

// waitReport waits for tenant/job's report like client.Wait, passing
// status updates to progress (nil: none), and says on w, once, when the
// job has gone after without a status update while queued: without a
// coordinator (or a free one) the wait would otherwise be silent.
func waitReport(ctx context.Context, w io.Writer, c jobsPort, tenant, job string, progress func(schemas.JobStatus), after time.Duration, natsURL string) (schemas.JobReport, error) {
	updates := make(chan struct{}, 1)
	onStatus := func(st schemas.JobStatus) {
		select {
		case updates <- struct{}{}:
		default:
		}
		if progress != nil {
			progress(st)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // ends with the wait, below
		defer close(done)
		t := time.NewTimer(after)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-updates:
				t.Reset(after)
			case <-t.C:
				// Not registered yet is queued too: a tenant's job is
				// registered by the coordinator that takes it in.
				st, err := c.Status(wctx, tenant, job)
				if err == nil && st.State == schemas.StateQueued || errors.Is(err, client.ErrNotFound) {
					why, err := c.QueuedReason(wctx, tenant, job)
					if err != nil {
						return
					}
					hint := ""
					if why == client.NoCoordinator {
						hint = fmt.Sprintf(" (is a maker coordinator running on %s?)", bus.RedactURL(natsURL))
					}
					fmt.Fprintf(w, "%s/%s is still queued after %s: %s; it stays queued until a coordinator takes it%s\n",
						tenant, job, after, why, hint)
					return
				}
				t.Reset(after)
			}
		}
	}()
	rep, err := c.Wait(ctx, tenant, job, onStatus)
	cancel()
	<-done
	return rep, err
}
