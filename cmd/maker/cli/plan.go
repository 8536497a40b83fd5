package cli

import (
	"fmt"
	"math"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/core/plan"
)

// Default prices for `maker plan`: gpt-4.1-mini's list prices, the model
// of the paper's million-step run (USD per million tokens).
const (
	defaultInputPrice  = 0.40
	defaultOutputPrice = 1.60
)

func planCmd(e *env) *cobra.Command {
	var (
		in     plan.Input
		disks  int
		asJSON bool
		// cal: where --p comes from when not given (calibrate.go)
		cal calibrationFlags
	)
	cmd := &cobra.Command{
		Use:   "plan (--steps S | --disks N) (--p P | --model M) [--target T]",
		Short: "Before a run: what k, how many samples, what cost, what chance of success",
		Long: `plan applies MAKER's formulas. With p the chance one valid sample is right,
r = (1-p)/p and s steps:
  per-step success   p_vote = 1/(1+r^k)        whole task   p_full = p_vote^s
  smallest k         k_min = ceil(ln(t^(-1/s) - 1) / ln r)
  votes per step     E[N] = k/(2p-1) * (1-r^k)/(1+r^k)
  cost               c * s * E[N] / v   (c = price of one call, input and output tokens;
                                          v = share of samples surviving red flags)
Voting only converges for p > 0.5.

Without --p, --model M takes p, the valid fraction and the tokens per call from M's
calibration stored in the fleet (maker calibrate) for --task and its current prompt.`,
		Example: `  maker plan --disks 20 --p 0.998 --target 0.95
  maker plan --steps 1000000 --p 0.99 --json
  maker plan --disks 20 --model gpt-4.1-mini --nats nats://127.0.0.1:4222`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			switch {
			case fl.Changed("steps") && fl.Changed("disks"):
				return usagef("give --steps or --disks, not both")
			case fl.Changed("disks"):
				s, err := plan.Steps(disks)
				if err != nil {
					return usageError{err}
				}
				in.Steps = s
			case !fl.Changed("steps"):
				return usagef("give --steps S or --disks N")
			}
			pSource := ""
			if !fl.Changed("p") {
				if cal.model == "" {
					return usagef("--p is required: the chance one valid sample is right, in (0.5, 1) (or --model M to take it from M's stored calibration: maker calibrate)")
				}
				c, err := cal.lookup(cmd.Context(), disks)
				if err != nil {
					return err
				}
				in.P, pSource = c.JobP()
				if !fl.Changed("valid-fraction") && c.ValidFraction > 0 {
					in.ValidFraction = c.ValidFraction
				}
				if !fl.Changed("input-tokens") {
					in.InputTokens = max(1, int(math.Round(c.PromptTokensMean)))
				}
				if !fl.Changed("output-tokens") {
					in.OutputTokens = max(1, int(math.Round(c.CompletionTokensMean)))
				}
			}
			if fl.Changed("target") && !(in.Target > 0 && in.Target < 1) {
				return usagef("--target %v must be in (0, 1)", in.Target)
			}
			if fl.Changed("valid-fraction") && !(in.ValidFraction > 0 && in.ValidFraction <= 1) {
				return usagef("--valid-fraction %v must be in (0, 1]", in.ValidFraction)
			}
			// plan.Input reads 0 tokens as the default; an explicit 0 is
			// a mistake, not a request for the default.
			if fl.Changed("input-tokens") && in.InputTokens < 1 {
				return usagef("--input-tokens %d must be >= 1", in.InputTokens)
			}
			if fl.Changed("output-tokens") && in.OutputTokens < 1 {
				return usagef("--output-tokens %d must be >= 1", in.OutputTokens)
			}
			if fl.Changed("k") && in.K < 1 {
				return usagef("--k %d: k must be >= 1", in.K)
			}
			pl, err := plan.Compute(in)
			if err != nil {
				return usageError{err}
			}
			if asJSON {
				return writeJSON(e.stdout, struct {
					plan.Plan
					// PSource: where p came from, when not from --p.
					PSource string `json:"p_source,omitempty"`
				}{pl, pSource})
			}
			w := e.stdout
			fmt.Fprintf(w, "steps %d   p %g   target %g   valid fraction %g\n", pl.Steps, pl.P, pl.Target, pl.ValidFraction)
			if pSource != "" {
				fmt.Fprintf(w, "p, valid fraction, tokens  from %s\n", pSource)
			}
			fmt.Fprintf(w, "k_min                      %d   (p_full at k_min %.6f)\n", pl.KMin, pl.PFullKMin)
			if pl.K != pl.KMin {
				note := ""
				if !pl.MeetsTarget {
					note = "   BELOW TARGET"
				}
				fmt.Fprintf(w, "k                          %d%s\n", pl.K, note)
			}
			fmt.Fprintf(w, "p_vote (per step)          %.10f\n", pl.PVote)
			fmt.Fprintf(w, "p_full (whole task)        %.6f\n", pl.PFull)
			fmt.Fprintf(w, "expected votes per step    %.4f   (shortcut k/(2p-1) %.4f)\n", pl.ExpectedVotesPerStep, pl.ShortcutVotesPerStep)
			fmt.Fprintf(w, "expected samples per step  %.4f\n", pl.ExpectedSamplesPerStep)
			fmt.Fprintf(w, "expected samples in all    %.0f\n", pl.ExpectedTotalSamples)
			fmt.Fprintf(w, "cost per call              $%.6f   (%d in at $%g/M, %d out at $%g/M)\n",
				pl.CostPerCallUSD, pl.InputTokens, pl.InputUSDPerMTok, pl.OutputTokens, pl.OutputUSDPerMTok)
			fmt.Fprintf(w, "expected cost              $%.2f\n", pl.ExpectedCost)
			fmt.Fprintf(w, "expected cost with n       $%.2f   (%.2f calls a step, not %.2f: a wave's samples after the first in one call, the prompt paid once; coordinator --samples-per-call)\n",
				pl.ExpectedCostWithN, pl.CallsPerStepWithN, pl.ExpectedSamplesPerStep)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.Int64Var(&in.Steps, "steps", 0, "number of steps s")
	fl.IntVar(&disks, "disks", 0, "Towers of Hanoi disks n (s = 2^n - 1), 1..30")
	fl.Float64Var(&in.P, "p", 0, "chance one valid sample is right, in (0.5, 1)")
	fl.Float64Var(&in.Target, "target", plan.DefaultTarget, "wanted chance the whole task is solved, in (0, 1)")
	fl.IntVar(&in.K, "k", 0, "evaluate this margin instead of k_min")
	fl.Float64Var(&in.ValidFraction, "valid-fraction", 1, "share of samples that survive red-flagging, in (0, 1]")
	fl.IntVar(&in.InputTokens, "input-tokens", plan.DefaultInputTokens, "input tokens per call (the paper counts about 600)")
	fl.IntVar(&in.OutputTokens, "output-tokens", plan.DefaultOutputTokens, "output tokens per call")
	fl.Float64Var(&in.InputUSDPerMTok, "input-price", defaultInputPrice, "USD per million input tokens (default: gpt-4.1-mini)")
	fl.Float64Var(&in.OutputUSDPerMTok, "output-price", defaultOutputPrice, "USD per million output tokens (default: gpt-4.1-mini)")
	fl.BoolVar(&asJSON, "json", false, "print the plan as JSON")
	cal.add(cmd)
	return cmd
}
