package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/app/breakglass"
	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/schemas"
)

// parentEnv, when set, marks every request as made from inside the panel
// of that request id, which the judge refuses (panels never open panels):
// an agent serving as a panel member runs its tools with it set.
const parentEnv = "MAKER_BREAKGLASS_PARENT"

// parseTried reads --tried KIND=NOTE values.
func parseTried(vals []string) (map[string]string, error) {
	out := make(map[string]string)
	for _, v := range vals {
		kind, note, ok := strings.Cut(v, "=")
		kind = strings.TrimSpace(kind)
		if !ok || strings.TrimSpace(note) == "" {
			return nil, fmt.Errorf("--tried %q: want KIND=NOTE, KIND one of %s", v, strings.Join(schemas.RequiredAttempts(), ", "))
		}
		if !slices.Contains(schemas.RequiredAttempts(), kind) {
			return nil, fmt.Errorf("--tried %q: KIND must be one of %s", v, strings.Join(schemas.RequiredAttempts(), ", "))
		}
		out[kind] = note
	}
	return out, nil
}

func breakglassCmd(e *env) *cobra.Command {
	var (
		natsURL, fusionPath string
		in                  breakglass.Input
		tried               []string
		asJSON              bool
		timeout             time.Duration
		api                 *apiFlags
	)
	cmd := &cobra.Command{
		Use:   `breakglass "break glass: <problem>"`,
		Short: "Ask the judge's panel about a problem that resisted everything else, and wait for the answer",
		Long: `breakglass sends one break-glass request to the judges and prints their answer.

The problem must start with "break glass:", and --tried must record what already failed on
it: a local model, a single frontier model and the existing tools (one --tried of each).
Files (--file) are read only from --root (default: the current directory); credential-like
files (.env, *.pem, *.key, *.creds, files holding API or private keys) are withheld and the
attempt is audited. AGENTS.md in --root, when present, is sent as the project's constraints.

A request estimated over the approval threshold waits until a person runs
"maker judge approve ID". A refused, denied or failed request exits 1 with the reason on
stderr.
` + apiHelp + `
Over the API (POST /v1/breakglass, then GET /v1/breakglass/{id} until the final answer) the
tenant and the requester are the API key's: --tenant and --requester are refused.`,
		Example: `  maker breakglass "break glass: nil pointer panic in the voter after a NATS reconnect" \
    --tried local_model="qwen3: blamed the network" --tried frontier_model="gpt-5.5: suggested a retry, no change" \
    --tried tools="go test -race: no race reported" --file voter/voter.go --log build.log --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hc, err := api.client(cmd)
			if err != nil {
				return err
			}
			if hc != nil {
				if err := refuseWithAPI(cmd, "the API key says the tenant and who asks", "tenant", "requester"); err != nil {
					return err
				}
			}
			switch {
			case len(args) == 1 && fusionPath != "":
				return usagef("give the problem or --fusion-request, not both")
			case len(args) == 1:
				in.Problem = args[0]
			case fusionPath != "":
				body, err := readInput(fusionPath)
				if err != nil {
					return usagef("--fusion-request: %v", err)
				}
				in.FusionBody = body
			default:
				return usagef(`give the problem as one argument: "break glass: <problem>"`)
			}
			if in.Tried, err = parseTried(tried); err != nil {
				return usageError{err}
			}
			if !cmd.Flags().Changed("budget") {
				in.BudgetUSD = 0
			}
			in.Parent = os.Getenv(parentEnv)
			req, warnings, err := breakglass.Build(in)
			if err != nil {
				return usageError{err}
			}
			for _, w := range warnings {
				fmt.Fprintln(e.stderr, "maker: "+w)
			}
			var judges judgePort
			if hc != nil {
				judges = apiFleet{hc}
			} else {
				js, closeNC, err := connectJS(natsURL, "maker-breakglass", natsAuth(cmd.Context()))
				if err != nil {
					return err
				}
				defer closeNC()
				judges = natsJudge{js: js, ns: bus.DefaultNamespace, identity: natsAuth(cmd.Context()).IdentityName(), notes: e.stderr}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			resp, err := judges.Ask(ctx, req, func(r *schemas.BreakGlassResponse) {
				fmt.Fprintf(e.stderr, "maker: %s: %s; waiting (up to --timeout %s)\n", r.RequestID, r.Reason, timeout)
			})
			if resp == nil {
				return err
			}
			if asJSON {
				if perr := writeJSON(e.stdout, resp); perr != nil {
					return perr
				}
			} else if err == nil {
				printAnswer(e.stdout, resp)
			}
			if err != nil {
				return fmt.Errorf("%s %s: %s", resp.RequestID, resp.Outcome, resp.Reason)
			}
			if resp.Outcome == schemas.BreakGlassDegraded {
				fmt.Fprintf(e.stderr, "maker: %s degraded: %s\n", resp.RequestID, resp.Reason)
			}
			return nil
		},
	}
	natsFlag(cmd, &natsURL)
	api = addAPIFlags(cmd)
	fl := cmd.Flags()
	fl.StringArrayVar(&tried, "tried", nil, "what already failed, KIND=NOTE, KIND one of local_model, frontier_model, tools (give all three)")
	fl.StringVar(&in.ProblemType, "type", "", "problem type: lean_proof, code_bug, architecture, math_novel, infra_debug (default: detected)")
	fl.StringArrayVar(&in.Files, "file", nil, "context file under --root (repeatable)")
	fl.StringVar(&in.LogPath, "log", "", "build or test log under --root (its last 128 KiB are sent)")
	fl.StringVar(&in.Constraints, "constraints", "", "constraints file under --root (default AGENTS.md when present)")
	fl.StringVar(&in.Root, "root", envOr("MAKER_JUDGE_ROOT", "."), "the only directory files are read from [$MAKER_JUDGE_ROOT]")
	fl.Float64Var(&in.BudgetUSD, "budget", 1.00, "most this call may cost, USD (default: the judge's, 1.00)")
	fl.StringVar(&in.Session, "session", envOr("MAKER_SESSION", "default"), "session, for the per-session limits [$MAKER_SESSION]")
	fl.StringVar(&in.Tenant, "tenant", schemas.DefaultTenant, "tenant")
	fl.StringVar(&in.ID, "id", "", "request id (default: generated); asking again with an id returns its stored answer")
	fl.StringVar(&in.Requester, "requester", os.Getenv("USER"), "who asks, for the audit trail (default $USER)")
	fl.StringVar(&fusionPath, "fusion-request", "", "read an OpenRouter fusion-shaped request (model, plugins, messages) from FILE ('-' for stdin) instead of the problem argument")
	fl.BoolVar(&asJSON, "json", false, "print the whole response as JSON")
	fl.DurationVar(&timeout, "timeout", 15*time.Minute, "how long to wait for the answer (including a person's approval)")
	return cmd
}

func readInput(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(io.LimitReader(os.Stdin, schemas.MaxMessageBytes))
	}
	return os.ReadFile(path)
}

// printAnswer writes a response for people.
func printAnswer(w io.Writer, r *schemas.BreakGlassResponse) {
	fmt.Fprintf(w, "%s (%s, %s, %s)\n\n", strings.ToUpper(r.Outcome), r.RequestID, r.ProblemType, r.Mode)
	fmt.Fprintf(w, "DIAGNOSIS\n  %s\n\n", r.Diagnosis)
	fmt.Fprintf(w, "SOLUTION (confidence %.2f)\n  %s\n", r.Solution.Confidence, r.Solution.Approach)
	for _, f := range r.Solution.FilesToChange {
		fmt.Fprintf(w, "  - change %s\n", f)
	}
	for path, code := range r.Solution.CodeSnippets {
		fmt.Fprintf(w, "  --- %s\n%s\n", path, code)
	}
	list := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s\n", title)
		for i, s := range items {
			fmt.Fprintf(w, "  %d. %s\n", i+1, s)
		}
	}
	list("ALTERNATIVES", r.Alternatives)
	list("RISKS", r.Risks)
	list("PANEL CONSENSUS", r.PanelAnalysis.Consensus)
	list("CONTRADICTIONS", r.PanelAnalysis.Contradictions)
	list("PARTIAL COVERAGE", r.PanelAnalysis.PartialCoverage)
	list("UNIQUE INSIGHTS", r.PanelAnalysis.UniqueInsights)
	list("BLIND SPOTS", r.PanelAnalysis.BlindSpots)
	fmt.Fprintf(w, "\nCOST  $%.4f actual, $%.4f estimated, budget $%.2f; panel %s, judge %s\n",
		r.Cost.ActualUSD, r.Cost.EstimateUSD, r.Cost.BudgetUSD, strings.Join(r.Panel, ", "), r.JudgeModel)
	if len(r.FailedMembers) > 0 {
		fmt.Fprintf(w, "FAILED MEMBERS  %s\n", strings.Join(r.FailedMembers, ", "))
	}
	for _, x := range r.ExcludedFiles {
		fmt.Fprintf(w, "WITHHELD  %s: %s\n", x.Path, x.Reason)
	}
}

// awaitJudge waits, on a secured fleet, until the judge's streams and
// buckets exist: only the judge (and the admin) may create them, so a
// tenant asking first would be refused. Without an identity, or as the
// admin, judgeclient creates what is missing, as in the quick start.
func awaitJudge(ctx context.Context, js jetstream.JetStream, identity string, w io.Writer) error {
	if identity == "" || identity == auth.Admin {
		return nil
	}
	said := false
	for {
		_, err := topology.OpenJudge(ctx, js, topology.JudgeConfig{})
		if !errors.Is(err, topology.ErrNoJudge) {
			return err
		}
		if !said {
			fmt.Fprintln(w, "maker: waiting for the judge's topology: start maker judge, or run maker topology create (as the admin)")
			said = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the judge's topology: %w (%w)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
