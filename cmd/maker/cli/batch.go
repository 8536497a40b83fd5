package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/client"
	"github.com/makerfleet/makerfleet/schemas"
)

// batchCmd is maker batch: batches of jobs from a JSONL file, through the
// public client (package client, over internal/batch).
func batchCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "batch",
		Short: "Run batches of jobs: one job per line of a JSONL file, results in input order",
		Long: `A batch is a JSONL file, one job per line in the OpenAI Batch API's shape where it fits:
  {"custom_id": "row-1", "task": "hanoi", "params": {"disks": 3}, "k": 2}
(custom_id, task, params and k, plus the optional task_version, seed, priority, budget_usd,
pricing and the other job fields). Each line is checked as maker submit would; an invalid
line is kept in the batch's error file with its line number and the rest runs. A custom_id
given twice refuses the whole batch, and nothing of it runs. The fleet's coordinators run
the jobs in input order, at most --window at once; the output has one line per input line,
in input order, with its custom_id and the job's report, or its error.
` + apiHelp,
	})
	cmd.AddCommand(batchSubmitCmd(e), batchStatusCmd(e), batchFileCmd(e, "output"), batchFileCmd(e, "errors"),
		batchCancelCmd(e), batchListCmd(e))
	return cmd
}

// batchFlags are what every batch command takes.
type batchFlags struct {
	natsURL, tenant string
	asJSON          bool
	api             *apiFlags
}

func (f *batchFlags) add(cmd *cobra.Command, json bool) {
	natsFlag(cmd, &f.natsURL)
	f.api = addAPIFlags(cmd)
	cmd.Flags().StringVar(&f.tenant, "tenant", schemas.DefaultTenant, "tenant of the batch (an ID of the form tenant/id must name the same; not with --api: a batch is the API key's tenant's)")
	if json {
		cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	}
}

// dial connects for a batch command of tenant: through the API (--api),
// as the key's tenant, or to the fleet's NATS.
func (f *batchFlags) dial(cmd *cobra.Command, tenant string) (batchesPort, error) {
	hc, err := f.api.client(cmd)
	if err != nil {
		return nil, err
	}
	if hc != nil {
		if err := refuseWithAPI(cmd, "a batch is the API key's tenant's", "tenant"); err != nil {
			return nil, err
		}
		return apiFleet{hc}, nil
	}
	return dialClient(cmd.Context(), f.natsURL, "maker-"+strings.ReplaceAll(cmd.CommandPath(), " ", "-"), tenant)
}

// dialBatch reads the ID argument arg (see batchRef) and connects for its
// tenant; with --api the tenant is "" (the key's) unless arg names one.
func (f *batchFlags) dialBatch(cmd *cobra.Command, arg string) (c batchesPort, tenant, id string, err error) {
	tenant, id, err = f.batchRef(cmd, arg)
	if err != nil {
		return nil, "", "", err
	}
	if c, err = f.dial(cmd, tenant); err != nil {
		return nil, "", "", err
	}
	if _, api := c.(apiFleet); api && !strings.Contains(arg, "/") {
		tenant = ""
	}
	return c, tenant, id, nil
}

// batchRef reads an ID argument: "id" (in --tenant) or "tenant/id".
func (f *batchFlags) batchRef(cmd *cobra.Command, arg string) (tenant, id string, err error) {
	tenant, id = f.tenant, arg
	if strings.Count(arg, "/") > 1 {
		return "", "", usagef("invalid batch ID %q: ID is id or tenant/id", arg)
	}
	if t, b, ok := strings.Cut(arg, "/"); ok {
		if cmd.Flags().Changed("tenant") && t != f.tenant {
			return "", "", usagef("ID %q names tenant %q, but --tenant is %q: give the batch id alone, or the same tenant", arg, t, f.tenant)
		}
		tenant, id = t, b
	}
	if err := checkTenant(tenant); err != nil {
		return "", "", err
	}
	if schemas.ValidBatchID(id) != nil {
		return "", "", usagef("invalid batch id %q: want batch_ and 1-34 of a-z and 0-9", id)
	}
	return tenant, id, nil
}

func batchSubmitCmd(e *env) *cobra.Command {
	var (
		f                 batchFlags
		opts              client.BatchOptions
		wait, quiet       bool
		output, errorFile string
	)
	cmd := &cobra.Command{
		Use:   "submit FILE.jsonl",
		Short: "Submit a batch from a JSONL file (- for stdin); with --wait, wait for it and write its output",
		Long: `Submits the batch and prints its id (--json: its record, with the lines' counts). With
--wait it waits until the batch has ended, then writes its output (JSONL, one line per input
line in input order) to --output FILE, or to stdout without it, and its error file to
--errors FILE if given; a summary goes to stderr (and, with --output, to stdout: --json the
batch's record). A cancelled batch exits 1.
` + apiHelp + `
Over the API, --wait asks for the batch's record every second; --max-lines is the server's.`,
		Example: `  maker batch submit jobs.jsonl --nats nats://127.0.0.1:4222 --wait --output results.jsonl --errors errors.jsonl
  maker batch submit jobs.jsonl --api http://127.0.0.1:8000 --api-key "$KEY" --wait --output results.jsonl`,
		Args: exactArgs(1, "FILE.jsonl (- for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTenant(f.tenant); err != nil {
				return err
			}
			if !wait && (output != "" || errorFile != "") {
				return usagef("--output and --errors need --wait (or use maker batch output/errors ID)")
			}
			if opts.Webhook != "" {
				if err := schemas.ValidWebhookURL(opts.Webhook); err != nil {
					return usagef("--webhook: %v", err)
				}
			}
			in, closeIn, err := openInput(args[0])
			if err != nil {
				return err
			}
			defer closeIn()
			c, err := f.dial(cmd, f.tenant)
			if err != nil {
				return err
			}
			defer c.Close()
			if _, api := c.(apiFleet); api {
				if err := refuseWithAPI(cmd, "the server's own line limits apply", "max-lines"); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			rec, err := c.SubmitBatch(ctx, in, opts)
			if err != nil {
				return clientErr(err)
			}
			if !wait {
				if f.asJSON {
					return writeJSON(e.stdout, rec)
				}
				fmt.Fprintln(e.stdout, rec.ID)
				if !quiet {
					fmt.Fprintf(e.stderr, "%s: %s\n", rec.ID, batchCounts(rec))
				}
				return nil
			}
			if !quiet {
				fmt.Fprintf(e.stderr, "submitted %s: %s\n", rec.ID, batchCounts(rec))
			}
			done, err := c.WaitBatch(ctx, "", rec.ID, batchProgress(e.stderr, quiet))
			if err != nil {
				return fmt.Errorf("waiting for batch %s: %w", rec.ID, err)
			}
			if errorFile != "" {
				if err := writeFileFrom(errorFile, func(w io.Writer) error { return c.BatchErrors(ctx, "", rec.ID, w) }); err != nil {
					return err
				}
			}
			if output == "" {
				if err := c.BatchOutput(ctx, "", rec.ID, e.stdout); err != nil {
					return err
				}
			} else if err := writeFileFrom(output, func(w io.Writer) error { return c.BatchOutput(ctx, "", rec.ID, w) }); err != nil {
				return err
			}
			if !quiet {
				fmt.Fprintf(e.stderr, "%s %s: %s\n", done.ID, done.State, batchCounts(done))
			}
			if output != "" {
				if f.asJSON {
					if err := writeJSON(e.stdout, done); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(e.stdout, "%s %s: %s\n", done.ID, done.State, batchCounts(done))
				}
			}
			if done.State == schemas.BatchCancelled {
				return fmt.Errorf("batch %s was cancelled", done.ID)
			}
			return nil
		},
	}
	f.add(cmd, true)
	fl := cmd.Flags()
	fl.IntVar(&opts.Priority, "priority", 0, "priority of the lines that set none, 0 to 9 (higher first, within the tenant)")
	fl.IntVar(&opts.Window, "window", 0, "most jobs of the batch unfinished at once (default 32)")
	fl.IntVar(&opts.MaxLines, "max-lines", 0, "refuse a batch of more lines (default 50,000)")
	fl.StringVar(&opts.Webhook, "webhook", "", "POST the batch's end to this http(s) URL, signed with the tenant's secret (lines may name their own for their jobs)")
	fl.BoolVar(&wait, "wait", false, "wait for the batch to end, then write its output")
	fl.StringVar(&output, "output", "", "with --wait: write the output (JSONL) to this file instead of stdout")
	fl.StringVar(&errorFile, "errors", "", "with --wait: write the error file (JSONL) to this file")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress or summary on stderr")
	return cmd
}

// openInput opens a batch's input: a file, or stdin for "-".
func openInput(name string) (io.Reader, func(), error) {
	if name == "-" {
		return os.Stdin, func() {}, nil
	}
	fh, err := os.Open(name)
	if err != nil {
		return nil, nil, usageError{err}
	}
	return fh, func() { _ = fh.Close() }, nil
}

// writeFileFrom writes what write produces to the file name.
func writeFileFrom(name string, write func(io.Writer) error) error {
	fh, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(fh); err != nil {
		_ = fh.Close()
		return err
	}
	return fh.Close()
}

// batchCounts is a one-line summary of a batch's counts.
func batchCounts(r schemas.BatchRecord) string {
	c := r.Counts
	return fmt.Sprintf("%d lines (%d invalid), %d submitted, %d completed, %d failed, %d cancelled",
		c.Total, c.Invalid, c.Submitted, c.Completed, c.Failed, c.Cancelled)
}

// batchProgress prints a batch's state on w when it changes and at every
// tenth of its lines done (nil when quiet).
func batchProgress(w io.Writer, quiet bool) func(schemas.BatchRecord) {
	if quiet {
		return nil
	}
	lastState, lastTenth := "", int64(-1)
	return func(r schemas.BatchRecord) {
		c := r.Counts
		done := c.Completed + c.Failed + c.Cancelled
		tenth := int64(10)
		if c.Total > 0 {
			tenth = 10 * done / c.Total
		}
		if r.State == lastState && tenth == lastTenth {
			return
		}
		lastState, lastTenth = r.State, tenth
		fmt.Fprintf(w, "%s %s: %d of %d lines done (%d completed, %d failed, %d cancelled)\n",
			r.ID, r.State, done, c.Total, c.Completed, c.Failed, c.Cancelled)
	}
}

func batchStatusCmd(e *env) *cobra.Command {
	return batchRecordCmd(e, "status ID", "Print a batch's state and counts", batchesPort.Batch)
}

func batchCancelCmd(e *env) *cobra.Command {
	return batchRecordCmd(e, "cancel ID",
		"Cancel a batch: no more of its jobs start, and its unfinished jobs are cancelled", batchesPort.CancelBatch)
}

// batchRecordCmd is a batch command that does one thing to batch ID and
// prints the batch's record: maker batch status and maker batch cancel.
func batchRecordCmd(e *env, use, short string,
	do func(batchesPort, context.Context, string, string) (schemas.BatchRecord, error)) *cobra.Command {
	var f batchFlags
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1, "ID (a batch id, or tenant/id)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, tenant, id, err := f.dialBatch(cmd, args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			rec, err := do(c, cmd.Context(), tenant, id)
			if err != nil {
				return clientErr(err)
			}
			if f.asJSON {
				return writeJSON(e.stdout, rec)
			}
			fmt.Fprintf(e.stdout, "%s/%s: %s, %s\n", rec.Tenant, rec.ID, rec.State, batchCounts(rec))
			return nil
		},
	}
	f.add(cmd, true)
	return cmd
}

// batchFileCmd is maker batch output and maker batch errors.
func batchFileCmd(e *env, which string) *cobra.Command {
	var (
		f      batchFlags
		output string
	)
	short := "Write a batch's output: one JSON line per input line, in input order, with its custom_id and report or error"
	if which == "errors" {
		short = "Write a batch's error file: one JSON line per failed input line, with its line number and error"
	}
	cmd := &cobra.Command{
		Use:   which + " ID",
		Short: short,
		Long: short + `.
A line whose job has not finished yet says so (error code not_finished); the file is streamed,
so a batch of any size takes little memory.`,
		Args: exactArgs(1, "ID (a batch id, or tenant/id)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, tenant, id, err := f.dialBatch(cmd, args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			write := func(w io.Writer) error {
				if which == "errors" {
					return c.BatchErrors(cmd.Context(), tenant, id, w)
				}
				return c.BatchOutput(cmd.Context(), tenant, id, w)
			}
			if output == "" {
				return clientErr(write(e.stdout))
			}
			return clientErr(writeFileFrom(output, write))
		},
	}
	f.add(cmd, false)
	cmd.Flags().StringVar(&output, "output", "", "write to this file instead of stdout")
	return cmd
}

func batchListCmd(e *env) *cobra.Command {
	var f batchFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's batches, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkTenant(f.tenant); err != nil {
				return err
			}
			c, err := f.dial(cmd, f.tenant)
			if err != nil {
				return err
			}
			defer c.Close()
			recs, err := c.ListBatches(cmd.Context(), f.tenant)
			if err != nil {
				return clientErr(err)
			}
			if f.asJSON {
				if recs == nil {
					recs = []schemas.BatchRecord{}
				}
				return writeJSON(e.stdout, recs)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BATCH\tSTATE\tLINES\tINVALID\tCOMPLETED\tFAILED\tCANCELLED\tCREATED")
			for _, r := range recs {
				c := r.Counts
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", r.ID, r.State, c.Total, c.Invalid, c.Completed, c.Failed, c.Cancelled, r.CreatedAt.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	f.add(cmd, true)
	return cmd
}
