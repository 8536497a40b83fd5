package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/core/pricing"
	"github.com/makerfleet/makerfleet/internal/pricetable"
	"github.com/makerfleet/makerfleet/schemas"
)

// pricesCmd sets and shows the fleet's price table (KV bucket
// maker_prices): what each model's tokens cost, which every coordinator
// prices every sample at (never at a job's own pricing), within a second
// of a change.
func pricesCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "prices",
		Short: "Set or show the fleet's price table: what each model's tokens cost (the operator's)",
		Long: `Every sample is priced by the model its request named (the escalation's stronger model, a
decorrelation model) at the fleet's price of that model, and a sample whose request names no model
(the voters' own) at the default record: never at a price a job claims. Budgets, the tenants' spend
per day, /v1/usage and every report's cost_usd count these prices. A job under a limit (a budget of
its own, or its tenant's spend per day) runs only work the table prices: it is refused at submit,
and paused as budget_exhausted when a price it needs is removed. Only the admin (and maker serve's
admin keys) may write the table.`,
	})
	var (
		natsURL, model string
		def, asJSON    bool
		in, out, cin   float64
	)
	// which is the record --model or --default names ("" for the default).
	which := func(cmd *cobra.Command, needed bool) (string, error) {
		switch {
		case def && cmd.Flags().Changed("model"):
			return "", usagef("give --model M or --default, not both")
		case def:
			return "", nil
		case model != "":
			if err := schemas.CheckModelName(model); err != nil {
				return "", usagef("--model: %v", err)
			}
			return model, nil
		case needed:
			return "", usagef("give --model M (the model a request names) or --default (the voters' own model)")
		}
		return "", nil
	}
	// onTable runs do on the fleet's price table for the record --model or
	// --default names (needed: one must be named; "" is the default
	// record, or none), once check passes.
	onTable := func(cmd *cobra.Command, needed bool, check func() error, do func(ctx context.Context, kv jetstream.KeyValue, model string) error) error {
		m, err := which(cmd, needed)
		if err != nil {
			return err
		}
		if err := check(); err != nil {
			return err
		}
		f, err := dialFleet(cmd.Context(), natsURL, "maker-prices")
		if err != nil {
			return err
		}
		defer f.Close()
		return do(cmd.Context(), f.topo.Prices, m)
	}
	none := func() error { return nil }
	set := &cobra.Command{
		Use:   "set",
		Short: "Set a model's price, or the default record's, in US dollars per million tokens",
		Example: `  maker prices set --default --input 0.15 --output 0.6
  maker prices set --model openai/gpt-5.5 --input 5 --output 20`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			check := func() error {
				if !cmd.Flags().Changed("input") || !cmd.Flags().Changed("output") {
					return usagef("give both --input and --output (US dollars per million tokens; 0 for a free model)")
				}
				for name, v := range map[string]float64{"--input": in, "--output": out, "--cached-input": cin} {
					if !(v >= 0 && v <= schemas.MaxModelPriceUSDPerMTok) || math.IsInf(v, 0) {
						return usagef("%s %v must be between 0 and %d US dollars per million tokens", name, v, schemas.MaxModelPriceUSDPerMTok)
					}
				}
				if cin > in {
					return usagef("--cached-input %v above --input %v: a cached prompt token costs at most an uncached one", cin, in)
				}
				return nil
			}
			return onTable(cmd, true, check, func(ctx context.Context, kv jetstream.KeyValue, m string) error {
				saved, err := pricetable.Set(ctx, kv, schemas.ModelPrice{Model: m, Default: m == "", InputUSDPerMTok: in, OutputUSDPerMTok: out, CachedInputUSDPerMTok: cin})
				if errors.Is(err, pricetable.ErrInvalid) {
					return usagef("%v", err)
				}
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, saved)
				}
				return printPrices(e, []schemas.ModelPrice{saved})
			})
		},
	}
	show := &cobra.Command{
		Use:   "show",
		Short: "Show the price table (the default record first), or one model's price",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return onTable(cmd, false, none, func(ctx context.Context, kv jetstream.KeyValue, m string) error {
				one := def || m != ""
				var recs []schemas.ModelPrice
				if one {
					p, err := pricetable.Get(ctx, kv, m)
					if errors.Is(err, pricetable.ErrNotFound) {
						return fmt.Errorf("%w: its samples are unpriced", err)
					}
					if err != nil {
						return err
					}
					recs = []schemas.ModelPrice{p}
				} else {
					t, err := pricetable.Load(ctx, kv)
					if err != nil {
						return err
					}
					recs = t.Records()
				}
				switch {
				case asJSON && one:
					return writeJSON(e.stdout, recs[0])
				case asJSON:
					return writeJSON(e.stdout, schemas.PriceList{Prices: recs})
				}
				return printPrices(e, recs)
			})
		},
	}
	unset := &cobra.Command{
		Use:   "unset",
		Short: "Remove a model's price, or the default record: its samples are unpriced from then on",
		Long: `Remove a model's price, or the default record. Its samples count no cost from then on, and a
job under a limit that asks the model pauses as budget_exhausted until it is priced again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return onTable(cmd, true, none, func(ctx context.Context, kv jetstream.KeyValue, m string) error {
				if err := pricetable.Unset(ctx, kv, m); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "removed the price of %s\n", pricing.Name(m))
				return nil
			})
		},
	}
	for _, c := range []*cobra.Command{set, show, unset} {
		natsFlag(c, &natsURL)
		c.Flags().StringVar(&model, "model", "", "the model, as a sample request names it")
		c.Flags().BoolVar(&def, "default", false, "the default record: the price of the voters' own model")
	}
	set.Flags().Float64Var(&in, "input", 0, "US dollars per million prompt tokens")
	set.Flags().Float64Var(&out, "output", 0, "US dollars per million completion tokens")
	set.Flags().Float64Var(&cin, "cached-input", 0, "US dollars per million prompt tokens a provider serves from its prompt cache (0: at --input)")
	for _, c := range []*cobra.Command{set, show} {
		c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	cmd.AddCommand(set, show, unset)
	return cmd
}

// printPrices writes price records as a table.
func printPrices(e *env, recs []schemas.ModelPrice) error {
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tINPUT USD/MTOK\tCACHED INPUT\tOUTPUT USD/MTOK\tUPDATED")
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, p := range recs {
		name := p.Model
		if p.Default {
			name = "(default)"
		}
		cached := "-"
		if p.CachedInputUSDPerMTok > 0 {
			cached = num(p.CachedInputUSDPerMTok)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, num(p.InputUSDPerMTok), cached, num(p.OutputUSDPerMTok), p.UpdatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}
