package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/apikey"
	"github.com/makerfleet/makerfleet/schemas"
)

// keysCmd is the admin's handle on the API keys of maker serve: make one
// (shown once), list them, revoke one.
func keysCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke the API keys of maker serve (an admin's command)",
		Long: `An API key (mk_<key id>_<secret>) lets HTTP requests to maker serve act for one tenant
(Authorization: Bearer KEY); an --admin key also reaches the fleet-wide views, and an
--approver key belongs to a person who may answer its tenant's steps that wait for one
(POST /v1/jobs/{id}/decide: only approver and admin keys may). The key is
printed once, when created: the fleet keeps only its SHA-256 (bucket maker_apikeys), so a
lost key cannot be shown again: revoke it and make another. A revoke applies to every serve
process within a second. On a secured fleet run these as the admin identity.`,
	})
	cmd.AddCommand(keysCreateCmd(e), keysListCmd(e), keysRevokeCmd(e))
	return cmd
}

// withKeyStore runs do on the fleet's API key bucket, within 30 seconds
// (it never creates a topology: on a server without a fleet it says how
// to get one).
func withKeyStore(ctx context.Context, natsURL string, do func(context.Context, *apikey.Store) error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	f, err := dialFleet(ctx, natsURL, "maker-keys")
	if err != nil {
		return err
	}
	defer f.Close()
	return do(ctx, apikey.New(f.topo))
}

// createdKey is what `maker keys create --json` prints: the key, shown
// this once, and its record.
type createdKey struct {
	Key string `json:"key"`
	keyView
}

// keyView is a key's record as the commands print it.
type keyView struct {
	KeyID      string     `json:"key_id"`
	Prefix     string     `json:"prefix"`
	Tenant     string     `json:"tenant"`
	Admin      bool       `json:"admin"`
	Approver   bool       `json:"approver"`
	Name       string     `json:"name,omitempty"`
	RatePerSec float64    `json:"rate_per_sec,omitempty"`
	Burst      int        `json:"burst,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

func viewOf(k schemas.APIKey) keyView {
	return keyView{KeyID: k.KeyID, Prefix: k.Prefix, Tenant: k.Tenant, Admin: k.Admin, Approver: k.Approver, Name: k.Name,
		RatePerSec: k.RatePerSec, Burst: k.Burst, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

// keyErr makes an option or reference the store refuses a usage error.
func keyErr(err error) error {
	if errors.Is(err, apikey.ErrInvalid) {
		return usageError{err}
	}
	return err
}

func keysCreateCmd(e *env) *cobra.Command {
	var (
		natsURL string
		opts    apikey.CreateOptions
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "create --tenant T [--admin] [--approver] [--name N] [--rate R] [--burst B]",
		Short: "Make an API key for a tenant and print it, once",
		Long: `keys create makes an API key for --tenant and prints it on stdout, the only time it is
ever shown (with --json: {"key": ..., "key_id": ..., "tenant": ..., "admin": ...}). Keep
it secret: whoever holds it acts as the tenant on maker serve.

An --approver key is a person's: it may answer the steps of --tenant's jobs that wait for
a person, and each decision is recorded as by its --name (give the person's name; without
one, the key's prefix mk_<key id>). A plain tenant key may not decide.`,
		Example: `  maker keys create --tenant alpha --name "alpha's batch runner" --nats nats://127.0.0.1:4222
  maker keys create --tenant alpha --approver --name alice
  maker keys create --tenant ops --admin --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Tenant == "" {
				return usagef("--tenant is required")
			}
			if err := schemas.ValidTenant(opts.Tenant); err != nil {
				return usageError{err}
			}
			return withKeyStore(cmd.Context(), natsURL, func(ctx context.Context, store *apikey.Store) error {
				key, rec, err := store.Create(ctx, opts)
				if err != nil {
					return keyErr(err)
				}
				if asJSON {
					return writeJSON(e.stdout, createdKey{Key: key, keyView: viewOf(rec)})
				}
				fmt.Fprintln(e.stdout, key)
				role := "tenant " + rec.Tenant
				if rec.Admin {
					role += ", admin"
				}
				if rec.Approver {
					role += ", approver deciding as " + apikey.Principal{KeyID: rec.KeyID, Name: rec.Name}.Person()
				}
				fmt.Fprintf(e.stderr, "API key %s (%s). It is shown this once: store it now. Revoke it with: maker keys revoke %s\n",
					rec.Prefix, role, rec.Prefix)
				return nil
			})
		},
	}
	natsFlag(cmd, &natsURL)
	fl := cmd.Flags()
	fl.StringVar(&opts.Tenant, "tenant", "", "the tenant the key acts for (required)")
	fl.BoolVar(&opts.Admin, "admin", false, "an admin key: it also reaches the fleet-wide views (every tenant's jobs, quotas, task registration)")
	fl.BoolVar(&opts.Approver, "approver", false, "a person's key: it may answer the tenant's steps that wait for a person, as --name")
	fl.StringVar(&opts.Name, "name", "", "a note for people: who holds the key, what for (at most 64 characters); an approver key's decisions are recorded as by it")
	fl.Float64Var(&opts.RatePerSec, "rate", 0, "the key's requests per second (0: the server's default)")
	fl.IntVar(&opts.Burst, "burst", 0, "the key's burst of requests (0: the server's default)")
	fl.BoolVar(&asJSON, "json", false, "print the key and its record as JSON")
	return cmd
}

func keysListCmd(e *env) *cobra.Command {
	var (
		natsURL, tenant string
		asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "list [--tenant T]",
		Short: "List the API keys (never the keys themselves), revoked ones too",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant != "" {
				if err := schemas.ValidTenant(tenant); err != nil {
					return usageError{err}
				}
			}
			return withKeyStore(cmd.Context(), natsURL, func(ctx context.Context, store *apikey.Store) error {
				keys, err := store.List(ctx, tenant)
				if err != nil {
					return err
				}
				views := make([]keyView, 0, len(keys))
				for _, k := range keys {
					views = append(views, viewOf(k))
				}
				if asJSON {
					return writeJSON(e.stdout, views)
				}
				if len(views) == 0 {
					fmt.Fprintln(e.stderr, "no API keys")
					return nil
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "PREFIX\tTENANT\tADMIN\tAPPROVER\tRATE\tBURST\tCREATED\tREVOKED\tNAME")
				for _, v := range views {
					rate, burst, revoked := "default", "default", "-"
					if v.RatePerSec > 0 {
						rate = fmt.Sprintf("%g/s", v.RatePerSec)
					}
					if v.Burst > 0 {
						burst = fmt.Sprint(v.Burst)
					}
					if v.RevokedAt != nil {
						revoked = v.RevokedAt.Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%s\t%s\t%s\t%s\t%s\n", v.Prefix, v.Tenant, v.Admin, v.Approver, rate, burst,
						v.CreatedAt.Format(time.RFC3339), revoked, v.Name)
				}
				return tw.Flush()
			})
		},
	}
	natsFlag(cmd, &natsURL)
	cmd.Flags().StringVar(&tenant, "tenant", "", "list only this tenant's keys (default: every tenant's)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func keysRevokeCmd(e *env) *cobra.Command {
	var (
		natsURL string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "revoke ID|PREFIX|KEY",
		Short: "Revoke an API key, by its key id, its prefix (mk_<key id>) or the key itself",
		Long: `keys revoke revokes an API key: every maker serve process refuses it (401) within a
second. The key stays listed, with when it was revoked. Revoking a revoked key changes
nothing.`,
		Example: `  maker keys revoke mk_3f9c2a7be041
  maker keys revoke 3f9c2a7be041 --json`,
		Args: exactArgs(1, "ID|PREFIX|KEY (a key id, mk_<key id>, or the key)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withKeyStore(cmd.Context(), natsURL, func(ctx context.Context, store *apikey.Store) error {
				rec, err := store.Revoke(ctx, args[0])
				if err != nil {
					return keyErr(err)
				}
				if asJSON {
					return writeJSON(e.stdout, viewOf(rec))
				}
				fmt.Fprintf(e.stdout, "revoked %s (tenant %s) at %s\n", rec.Prefix, rec.Tenant, rec.RevokedAt.Format(time.RFC3339))
				return nil
			})
		},
	}
	natsFlag(cmd, &natsURL)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the revoked key's record as JSON")
	return cmd
}
