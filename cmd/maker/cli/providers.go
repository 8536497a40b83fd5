package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/llm"
	"github.com/makerfleet/makerfleet/internal/providers"
	"github.com/makerfleet/makerfleet/schemas"
)

// providersCmd keeps the provider registry (KV bucket maker_providers):
// where each model is served, with what key reference, prices and limits.
// Voters started with --providers call models through it.
func providersCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "providers",
		Short: "Set, show or check the provider deployments voters call models through (the operator's)",
		Long: `A deployment is one place a model is served: an OpenAI-compatible base URL, where voters find
its key (an environment variable or a file on the voters' machines; the key itself is never
stored), the model it serves, its prices, and its requests and tokens per minute, shared by every
voter. Voters started with --providers (maker voter) use the deployments serving the model a sample
request names, pace themselves together under each one's limits (with --limits-redis), and fail
over between them. Only the admin may write the registry.`,
	})
	var (
		natsURL string
		asJSON  bool
	)
	// onRegistry runs do on the registry.
	onRegistry := func(cmd *cobra.Command, do func(ctx context.Context, kv jetstream.KeyValue) error) error {
		f, err := dialFleet(cmd.Context(), natsURL, "maker-providers")
		if err != nil {
			return err
		}
		defer f.Close()
		return do(cmd.Context(), f.topo.Providers)
	}

	list := &cobra.Command{
		Use:   "list",
		Short: "List the deployments",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return onRegistry(cmd, func(ctx context.Context, kv jetstream.KeyValue) error {
				ds, err := providers.List(ctx, kv)
				if err != nil && len(ds) == 0 {
					return err
				}
				if err != nil {
					fmt.Fprintf(e.stderr, "warning: %v\n", err)
				}
				if asJSON {
					return writeJSON(e.stdout, schemas.DeploymentList{Deployments: orEmpty(ds)})
				}
				return printDeployments(e, ds)
			})
		},
	}

	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show one deployment",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onRegistry(cmd, func(ctx context.Context, kv jetstream.KeyValue) error {
				d, err := providers.Get(ctx, kv, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, d)
				}
				return printDeployments(e, []schemas.Deployment{d})
			})
		},
	}

	var (
		d        schemas.Deployment
		fromFile string
	)
	set := &cobra.Command{
		Use:   "set [NAME]",
		Short: "Add or replace a deployment, or every deployment of a providers file",
		Example: `  maker providers set openai-east --base-url https://api.openai.com/v1 --api-key-env OPENAI_API_KEY \
      --model gpt-4.1-mini --input 0.4 --cached-input 0.1 --output 1.6 --rpm 5000 --tpm 2000000 --supports-n
  maker providers set local --base-url http://10.0.0.7:8000/v1 --model qwen3-8b --concurrency 32
  maker providers set --file deployments.json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ds []schemas.Deployment
			switch {
			case fromFile != "" && len(args) > 0:
				return usagef("give a NAME with its flags, or --file, not both")
			case fromFile != "":
				var err error
				if ds, err = providers.ReadFile(fromFile); err != nil {
					return usagef("%v", err)
				}
			case len(args) == 0:
				return usagef("give the deployment's NAME (or --file FILE)")
			default:
				d.Name = args[0]
				if d.BaseURL == "" || d.Model == "" {
					return usagef("give --base-url and --model")
				}
				if err := d.Check(); err != nil {
					return usagef("%v", err)
				}
				ds = []schemas.Deployment{d}
			}
			return onRegistry(cmd, func(ctx context.Context, kv jetstream.KeyValue) error {
				saved := make([]schemas.Deployment, 0, len(ds))
				for _, d := range ds {
					s, err := providers.Set(ctx, kv, d)
					if errors.Is(err, providers.ErrInvalid) {
						return usagef("%v", err)
					}
					if err != nil {
						return err
					}
					saved = append(saved, s)
				}
				if asJSON {
					return writeJSON(e.stdout, schemas.DeploymentList{Deployments: saved})
				}
				return printDeployments(e, saved)
			})
		},
	}
	sf := set.Flags()
	sf.StringVar(&fromFile, "file", "", `a providers file ({"deployments": [...]}, as list --json prints): set each`)
	sf.StringVar(&d.BaseURL, "base-url", "", "OpenAI-compatible base URL with its version prefix, e.g. https://api.openai.com/v1")
	sf.StringVar(&d.Model, "model", "", "the model it serves, as jobs and voters name it")
	sf.StringVar(&d.ProviderModel, "provider-model", "", "the name the provider knows the model by (an Azure deployment), if not --model")
	sf.StringVar(&d.APIKeyEnv, "api-key-env", "", "the variable holding its key on the voters' machines (ending in _KEY or _TOKEN)")
	sf.StringVar(&d.APIKeyFile, "api-key-file", "", "a file holding its key on the voters' machines (absolute path)")
	sf.Float64Var(&d.InputUSDPerMTok, "input", 0, "US dollars per million prompt tokens")
	sf.Float64Var(&d.CachedInputUSDPerMTok, "cached-input", 0, "US dollars per million prompt tokens served from the provider's cache")
	sf.Float64Var(&d.OutputUSDPerMTok, "output", 0, "US dollars per million completion tokens")
	sf.Int64Var(&d.RPM, "rpm", 0, "requests per minute, shared by every voter (0: none)")
	sf.Int64Var(&d.TPM, "tpm", 0, "tokens per minute, shared by every voter (0: none)")
	sf.IntVar(&d.Concurrency, "concurrency", 0, "calls one voter keeps in flight on it (0: the voter's --concurrency)")
	sf.BoolVar(&d.SupportsN, "supports-n", false, "it answers n > 1 with n choices")
	sf.BoolVar(&d.Disabled, "disabled", false, "keep the record but send it no calls")

	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a deployment: voters stop calling it within a second",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onRegistry(cmd, func(ctx context.Context, kv jetstream.KeyValue) error {
				if err := providers.Delete(ctx, kv, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "removed deployment %s\n", args[0])
				return nil
			})
		},
	}

	var (
		checkFile    string
		checkTimeout time.Duration
	)
	check := &cobra.Command{
		Use:   "check [NAME...]",
		Short: "Ask each deployment (or those named) whether it serves its model to its key, from this machine",
		Long: `Check reads each deployment's key where its record says (on this machine: run it where the
voters run), asks GET /models, and when the list does not name the model, asks the model for one
token. It prints what each answered and exits 1 if any does not serve its model.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var ds []schemas.Deployment
			load := func(ctx context.Context, kv jetstream.KeyValue) error {
				var err error
				ds, err = providers.List(ctx, kv)
				return err
			}
			var err error
			if checkFile != "" {
				ds, err = providers.ReadFile(checkFile)
				if err != nil {
					return usagef("%v", err)
				}
			} else if err = onRegistry(cmd, load); err != nil {
				return err
			}
			if len(args) > 0 {
				var pick []schemas.Deployment
				for _, name := range args {
					found := false
					for _, d := range ds {
						if d.Name == name {
							pick, found = append(pick, d), true
						}
					}
					if !found {
						return fmt.Errorf("%w %q", providers.ErrNotFound, name)
					}
				}
				ds = pick
			}
			if len(ds) == 0 {
				return errors.New("no deployment to check: maker providers set NAME --base-url URL --model M")
			}
			results := make([]providers.CheckResult, len(ds))
			failed := 0
			for i, d := range ds {
				ctx, cancel := context.WithTimeout(cmd.Context(), checkTimeout)
				results[i] = providers.Check(ctx, d, providers.KeySource{}, llm.Config{MaxAttempts: 1, AttemptTimeout: checkTimeout})
				cancel()
				if !results[i].OK {
					failed++
				}
			}
			if asJSON {
				if err := writeJSON(e.stdout, results); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "DEPLOYMENT\tMODEL\tRESULT\tDETAIL")
				for _, r := range results {
					res := "ok"
					if !r.OK {
						res = "FAILED"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.Model, res, oneLine(r.Detail, 200))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d deployments do not serve their model", failed, len(ds))
			}
			return nil
		},
	}
	check.Flags().StringVar(&checkFile, "file", "", "check the deployments of a providers file instead of the registry")
	check.Flags().DurationVar(&checkTimeout, "timeout", 15*time.Second, "time allowed to each deployment")

	for _, c := range []*cobra.Command{list, show, set, rm, check} {
		natsFlag(c, &natsURL)
	}
	for _, c := range []*cobra.Command{list, show, set, check} {
		c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	cmd.AddCommand(list, show, set, rm, check)
	return cmd
}

// printDeployments writes deployments as a table.
func printDeployments(e *env, ds []schemas.Deployment) error {
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODEL\tBASE URL\tKEY\tRPM\tTPM\tCONC\tN\tUSD/MTOK IN/CACHED/OUT\tSTATE")
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	lim := func(v int64) string {
		if v == 0 {
			return "-"
		}
		return strconv.FormatInt(v, 10)
	}
	for _, d := range ds {
		key := "-"
		switch {
		case d.APIKeyEnv != "":
			key = "$" + d.APIKeyEnv
		case d.APIKeyFile != "":
			key = d.APIKeyFile
		}
		model := d.Model
		if d.ProviderModel != "" {
			model += " (" + d.ProviderModel + ")"
		}
		n, state := "1", "enabled"
		if d.SupportsN {
			n = "n"
		}
		if d.Disabled {
			state = "disabled"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s/%s/%s\t%s\n", d.Name, model, d.BaseURL, key,
			lim(d.RPM), lim(d.TPM), lim(int64(d.Concurrency)), n,
			num(d.InputUSDPerMTok), num(d.CachedInputUSDPerMTok), num(d.OutputUSDPerMTok), state)
	}
	return tw.Flush()
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
