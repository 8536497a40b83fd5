package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/judgeclient"
	"github.com/makerfleet/makerfleet/internal/metrics"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/judge"
	"github.com/makerfleet/makerfleet/schemas"
)

// judgeCmd runs a judge replica; its subcommands are the judge's admin
// commands (approve, deny, pending, audit).
func judgeCmd(e *env) *cobra.Command {
	var (
		natsURL, baseURL, apiKey, configPath string
		metricsAddr                          string
		concurrency                          int
		drain                                time.Duration
	)
	cmd := &cobra.Command{
		Use:   "judge",
		Short: "Run a judge: answers break-glass and arbitration requests with a multi-model panel and a judge model",
		Long: `judge takes break-glass requests from NATS (stream MAKER_JUDGE, subject maker.v1.judge.<tenant>),
runs the trigger, prior-attempt, cost and session gates, calls the problem type's panel in
parallel, has the judge model synthesise one structured answer and stores it (KV bucket
maker_judge_answers) for the asker. It also takes the coordinator's arbitrations of voting
steps (stream MAKER_ARBITRATE, subject maker.v1.arbitrate.<tenant>) through their own gates
(shape, cost, per-job limits) and stores each step's decision the same way. Every
invocation is audited (stream MAKER_JUDGE_AUDIT).

Without --config every panel member and the judge live at --llm-base-url; a config file
(YAML or JSON, see docs/judge.md) sets panels, per-model endpoints and keys, prices and limits.`,
		Example: `  maker judge --nats nats://127.0.0.1:4222 --llm-base-url http://127.0.0.1:8080/v1
  maker judge --nats nats://127.0.0.1:4222 --llm-base-url http://127.0.0.1:8080/v1 --config judge.yaml
  maker judge approve bg-20251129T200000-1a2b3c --by alice
  maker judge answer bg-20251129T200000-1a2b3c --tenant acme --json`,
		// A role with admin subcommands: a word that is none of them is
		// a mistyped subcommand.
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings, err := judge.LoadSettings(configPath)
			if err != nil {
				return usageError{err}
			}
			if baseURL == "" && configPath == "" {
				return usagef("--llm-base-url is required (or a --config whose models name their base_url)")
			}
			if concurrency < 1 {
				return usagef("--concurrency must be >= 1, got %d", concurrency)
			}
			if apiKey == "" {
				apiKey = apiKeyFromEnv()
			}
			log := e.logger(slog.LevelInfo)
			nc, err := bus.Connect(natsURL, connName("judge", ""), natsAuth(cmd.Context()))
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			reg := newRoleMetrics(metricsAddr, "judge")
			var met *metrics.Judge
			if reg != nil {
				met = metrics.NewJudge(reg)
			}
			sv, err := judge.New(ctx, js, judge.Config{Settings: settings, BaseURL: baseURL, APIKey: apiKey,
				Concurrency: concurrency, SoftStop: drain, Logger: log, Metrics: met})
			if errors.Is(err, judge.ErrConfig) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if err := sv.Start(context.WithoutCancel(ctx)); err != nil {
				return err
			}
			ns := bus.DefaultNamespace
			stopMetrics, err := startMetrics(ctx, e, log, metricsAddr, reg, natsReady(nc), topologyReady(js, ns.JudgeStream(), ns.ArbitrateStream()))
			if err != nil {
				sv.Stop()
				return err
			}
			defer stopMetrics()
			log.Info("judge started", "llm_base_url", baseURL, "config", configPath, "concurrency", concurrency)
			<-ctx.Done()
			log.Info("judge stopping")
			sv.Stop()
			return nil
		},
	}
	natsFlag(cmd, &natsURL)
	fl := cmd.Flags()
	fl.StringVar(&baseURL, "llm-base-url", envOr("MAKER_LLM_BASE_URL", ""), "default OpenAI-compatible base URL for every model without its own [$MAKER_LLM_BASE_URL]")
	fl.StringVar(&apiKey, "api-key", "", "key for --llm-base-url (default $MAKER_LLM_API_KEY or $OPENAI_API_KEY)")
	fl.StringVar(&configPath, "config", envOr("MAKER_JUDGE_CONFIG", ""), "settings file: panels, models, prices, limits (YAML or JSON) [$MAKER_JUDGE_CONFIG]")
	fl.IntVar(&concurrency, "concurrency", 4, "requests this judge handles at once")
	fl.DurationVar(&drain, "drain-timeout", 30*time.Second, "on SIGTERM, time to finish requests in hand before handing them back")
	metricsFlag(cmd, &metricsAddr)
	cmd.AddCommand(judgeDecideCmd(e, true), judgeDecideCmd(e, false), judgePendingCmd(e), judgeAuditCmd(e), judgeAnswerCmd(e))
	tracingFlags(e, cmd, "judge")
	return cmd
}

// defaultApprover is the identity decisions are sent as by default: the
// approver's (docs/security.md). On a server without authorization any
// identity can be named; with it, the server lets each identity publish
// only on its own approval subject, so --as must be the connection's.
const defaultApprover = "approver"

func judgeDecideCmd(e *env, approve bool) *cobra.Command {
	var natsURL, by, as, tenant, reason string
	use, short := "deny ID", "Deny a break-glass or arbitration request held for approval"
	if approve {
		use, short = "approve ID", "Approve a break-glass or arbitration request held for approval (its estimate is over the approval threshold)"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.

The decision goes to a judge as identity --as (subject maker.v1.judge_approve.<identity>);
the judge refuses it when that identity is the one that asked for the call (tenant-<T> for
tenant T's break-glass calls, coordinator for arbitrations): nobody approves their own call.
--by names the person, for the audit trail.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if by == "" {
				return usagef("--by is required (who decides; default $USER)")
			}
			if tenant != "" {
				if err := checkTenant(tenant); err != nil {
					return err
				}
			}
			d := &schemas.ApprovalDecision{Header: schemas.NewHeader(schemas.KindApprovalDecision),
				RequestID: args[0], Tenant: tenant, Decision: schemas.DecisionDeny, By: by, Reason: reason}
			if approve {
				d.Decision = schemas.DecisionApprove
			}
			if err := d.Validate(); err != nil {
				return usageError{err}
			}
			// The identity deciding is the connection's own when it has one
			// (--nats-identity, or the seed's file name): with auth on the
			// server lets it publish only on its own approval subject.
			conn := natsAuth(cmd.Context()).IdentityName()
			if !cmd.Flags().Changed("as") && os.Getenv("MAKER_APPROVER_IDENTITY") == "" && conn != "" {
				as = conn
			}
			err := withJudgeAdmin(cmd, natsURL, func(ctx context.Context, js jetstream.JetStream) error {
				_, err := judgeclient.Decide(ctx, js.Conn(), bus.DefaultNamespace, as, d)
				return err
			})
			if cause := context.Cause(cmd.Context()); err != nil && errors.Is(cause, bus.ErrPermission) {
				err = cause // the server refused: say what, not "context canceled"
			}
			if errors.Is(err, bus.ErrPermission) && conn != "" && as != conn {
				return fmt.Errorf("%w; --as %s is not this connection's NATS identity %s, and the server lets an identity approve only as itself (drop --as, or connect as %s)", err, as, conn, as)
			}
			if errors.Is(err, judgeclient.ErrNotPending) || errors.Is(err, judgeclient.ErrOwnRequest) ||
				errors.Is(err, judgeclient.ErrInvalidDecision) || errors.Is(err, schemas.ErrInvalid) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			verb := "denied"
			if approve {
				verb = "approved"
			}
			fmt.Fprintf(e.stdout, "%s %s\n", verb, args[0])
			return nil
		},
	}
	natsFlag(cmd, &natsURL)
	fl := cmd.Flags()
	fl.StringVar(&by, "by", os.Getenv("USER"), "who decides, recorded in the audit trail (default $USER)")
	fl.StringVar(&as, "as", envOr("MAKER_APPROVER_IDENTITY", defaultApprover), "the identity deciding, never the requester's (default: the connection's NATS identity when it has one, else approver; the server's permissions must let the connection use it) [$MAKER_APPROVER_IDENTITY]")
	fl.StringVar(&tenant, "tenant", "", "the held request's tenant (needed only when two tenants hold the same id)")
	if !approve {
		fl.StringVar(&reason, "reason", "", "why, told to the asker")
	}
	return cmd
}

func judgeAnswerCmd(e *env) *cobra.Command {
	var (
		natsURL, tenant string
		asJSON          bool
		api             *apiFlags
	)
	cmd := &cobra.Command{
		Use:   "answer ID",
		Short: "Print the stored answer to one of the tenant's break-glass requests (held or final)",
		Long: `answer reads the judge's answer to request ID of --tenant. Answers are stored per tenant:
an id another tenant asked for is not found.
` + apiHelp + `
Over the API (GET /v1/breakglass/{id}) the answer is the API key's tenant's. Its --api-key
is the API key, not the judge's model key of maker judge --api-key.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hc, err := api.client(cmd)
			if err != nil {
				return err
			}
			if err := checkTenant(tenant); err != nil {
				return err
			}
			if schemas.ValidJobID(args[0]) != nil {
				return usagef("invalid request id %q: want %s", args[0], schemas.JobIDRule)
			}
			var resp schemas.BreakGlassResponse
			if hc != nil {
				named := ""
				if cmd.Flags().Changed("tenant") {
					named = tenant
				}
				resp, err = apiFleet{hc}.Answer(cmd.Context(), named, args[0])
			} else {
				err = withJudgeAdmin(cmd, natsURL, func(ctx context.Context, js jetstream.JetStream) (err error) {
					resp, err = natsJudge{js: js, ns: bus.DefaultNamespace}.Answer(ctx, tenant, args[0])
					return err
				})
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, &resp)
			}
			if resp.Outcome == schemas.BreakGlassAnswered || resp.Outcome == schemas.BreakGlassDegraded {
				printAnswer(e.stdout, &resp)
				return nil
			}
			fmt.Fprintf(e.stdout, "%s %s: %s\n", resp.RequestID, resp.Outcome, resp.Reason)
			return nil
		},
	}
	natsFlag(cmd, &natsURL)
	api = addAPIFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&tenant, "tenant", schemas.DefaultTenant, "the tenant that asked (with --api: the API key's)")
	fl.BoolVar(&asJSON, "json", false, "print the whole response as JSON")
	return cmd
}

func judgePendingCmd(e *env) *cobra.Command {
	var (
		natsURL string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "pending",
		Short: "List break-glass and arbitration requests waiting for approval",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list []schemas.BreakGlassApproval
			if err := withJudgeAdmin(cmd, natsURL, func(ctx context.Context, js jetstream.JetStream) (err error) {
				list, err = judge.Pending(ctx, js, bus.DefaultNamespace)
				return err
			}); err != nil {
				return err
			}
			return printTable(e.stdout, asJSON, list, "REQUEST\tTENANT\tSESSION\tESTIMATE\tSINCE\tPROBLEM", func(a schemas.BreakGlassApproval) string {
				return fmt.Sprintf("%s\t%s\t%s\t$%.2f\t%s\t%s", a.RequestID, a.Tenant, a.Session, a.EstimateUSD,
					a.RequestedAt.Format(time.RFC3339), oneLine(judge.HeldProblem(&a), 60))
			})
		},
	}
	natsFlag(cmd, &natsURL)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func judgeAuditCmd(e *env) *cobra.Command {
	var (
		natsURL, session, tenant string
		asJSON                   bool
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List the break-glass audit trail (every invocation, refusal, hold, approval and answer)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant != "" {
				if err := checkTenant(tenant); err != nil {
					return err
				}
			}
			if session != "" && schemas.ValidJobID(session) != nil {
				return usagef("invalid session %q: want %s", session, schemas.JobIDRule)
			}
			var recs []schemas.BreakGlassAudit
			if err := withJudgeAdmin(cmd, natsURL, func(ctx context.Context, js jetstream.JetStream) error {
				var err error
				recs, err = judge.ListAudit(ctx, js, bus.DefaultNamespace, tenant, session)
				return err
			}); err != nil {
				return err
			}
			return printTable(e.stdout, asJSON, recs, "AT\tREQUEST\tSESSION\tOUTCOME\tTYPE\tESTIMATE\tACTUAL\tAPPROVER\tREASON / PROBLEM", func(r schemas.BreakGlassAudit) string {
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t$%.2f\t$%.2f\t%s\t%s", r.At.Format(time.RFC3339), r.RequestID, r.Session,
					r.Outcome, dash(r.ProblemType), r.EstimateUSD, r.ActualUSD, dash(r.Approver), oneLine(firstOf(r.Reason, r.Problem), 70))
			})
		},
	}
	natsFlag(cmd, &natsURL)
	fl := cmd.Flags()
	fl.StringVar(&session, "session", "", "only this session")
	fl.StringVar(&tenant, "tenant", "", "only this tenant")
	fl.BoolVar(&asJSON, "json", false, "print JSON (an array of break_glass_audit records)")
	return cmd
}

// withJudgeAdmin runs fn for a short admin command: its own connection
// and a 60s deadline. The judge's topology must exist already: an admin
// command reads or decides what a judge holds, and creates nothing on a
// server that has no judge (the judge package's helpers would).
func withJudgeAdmin(cmd *cobra.Command, natsURL string, fn func(context.Context, jetstream.JetStream) error) error {
	js, closeNC, err := connectJS(natsURL, "maker-judge-admin", natsAuth(cmd.Context()))
	if err != nil {
		return err
	}
	defer closeNC()
	ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
	defer cancel()
	if _, err := topology.OpenJudge(ctx, js, topology.JudgeConfig{StartupWait: 10 * time.Second}); err != nil {
		if errors.Is(err, topology.ErrNoJudge) {
			return fmt.Errorf("%s: %w", bus.RedactURL(natsURL), err)
		}
		return err
	}
	return fn(ctx, js)
}

// printTable prints items as a JSON array, or as a table under header
// with one row (tab-separated) each.
func printTable[T any](w io.Writer, asJSON bool, items []T, header string, row func(T) string) error {
	if asJSON {
		if items == nil {
			items = []T{}
		}
		return json.NewEncoder(w).Encode(items)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, it := range items {
		fmt.Fprintln(tw, row(it))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// oneLine flattens s to one line of at most n runes.
func oneLine(s string, n int) string {
	r := []rune(s)
	for i, c := range r {
		if c == '\n' || c == '\r' || c == '\t' {
			r[i] = ' '
		}
	}
	if len(r) > n {
		r = append(r[:n-1], '…')
	}
	return string(r)
}
