package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/auth"
	"github.com/makerfleet/makerfleet/internal/bus"
)

// natsAuthFlags are the root's --nats-* flags: how every command proves
// its identity to NATS (bus.Auth), and the latest permission violation the
// server reported on any of its connections, for the final error.
type natsAuthFlags struct {
	identity, creds, nkey, tlsCert, tlsKey, tlsCA string

	mu        sync.Mutex
	violation error
}

// natsFlags adds the --nats-* flags to root, every command's, and hands
// them to the command in its context (bus.ContextWithAuth): each
// connection it opens takes them from there (natsAuth).
func (e *env) natsFlags(root *cobra.Command) {
	f := &e.nats
	fl := root.PersistentFlags()
	fl.StringVar(&f.creds, "nats-creds", envOr("MAKER_NATS_CREDS", ""), "NATS user credentials file (JWT, operator mode) [$MAKER_NATS_CREDS]")
	fl.StringVar(&f.nkey, "nats-nkey", envOr("MAKER_NATS_NKEY", ""), "NATS nkey seed file, as maker auth init writes them (<identity>.nk) [$MAKER_NATS_NKEY]")
	fl.StringVar(&f.tlsCert, "nats-tls-cert", envOr("MAKER_NATS_TLS_CERT", ""), "client certificate for mutual TLS with NATS (with --nats-tls-key) [$MAKER_NATS_TLS_CERT]")
	fl.StringVar(&f.tlsKey, "nats-tls-key", envOr("MAKER_NATS_TLS_KEY", ""), "client certificate's key [$MAKER_NATS_TLS_KEY]")
	fl.StringVar(&f.tlsCA, "nats-tls-ca", envOr("MAKER_NATS_TLS_CA", ""), "CA that signed the NATS server's certificate (default: the system's) [$MAKER_NATS_TLS_CA]")
	fl.StringVar(&f.identity, "nats-identity", envOr("MAKER_NATS_IDENTITY", ""),
		"identity this client connects as; its replies come under _INBOX.<identity> (default: the --nats-nkey or --nats-creds file name without extension) [$MAKER_NATS_IDENTITY]")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		routeRedisLog(e)
		if err := checkMetricsAddr(cmd); err != nil {
			return err
		}
		a, err := e.natsAuth()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		if serviceCommands[strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")] {
			// A service keeps running: what it was refused is logged, and
			// named again if it then fails.
			log := e.logger(slog.LevelInfo)
			record := a.OnViolation
			a.OnViolation = func(err error) {
				record(err)
				log.Error("the NATS server refused this identity", "err", err, "identity", a.IdentityName())
			}
		} else {
			// A refused request gets no answer: a command would wait for
			// its timeout, then say nothing of why. It stops at once and
			// Main names what was refused.
			var cancel context.CancelCauseFunc
			ctx, cancel = context.WithCancelCause(ctx)
			record := a.OnViolation
			a.OnViolation = func(err error) {
				record(err)
				cancel(err)
			}
		}
		cmd.SetContext(bus.ContextWithAuth(ctx, a))
		return nil
	}
}

// serviceCommands run until stopped; every other command is short.
var serviceCommands = map[string]bool{
	"coordinator": true, "voter": true, "judge": true, "simllm": true, "run": true, "bench": true, "mcp": true, "serve": true,
}

// natsAuth checks the --nats-* flags and returns them as a bus.Auth that
// records violations on e.
func (e *env) natsAuth() (bus.Auth, error) {
	f := &e.nats
	a := bus.Auth{Identity: f.identity, Creds: f.creds, NKey: f.nkey, TLSCert: f.tlsCert, TLSKey: f.tlsKey, TLSCA: f.tlsCA}
	for _, file := range []struct{ flag, path string }{
		{"--nats-creds", a.Creds}, {"--nats-nkey", a.NKey}, {"--nats-tls-cert", a.TLSCert},
		{"--nats-tls-key", a.TLSKey}, {"--nats-tls-ca", a.TLSCA},
	} {
		if file.path == "" {
			continue
		}
		if _, err := os.Stat(file.path); err != nil {
			return bus.Auth{}, usagef("%s: %w", file.flag, err)
		}
	}
	if err := a.Validate(); err != nil {
		return bus.Auth{}, usageError{err}
	}
	a.OnViolation = func(err error) {
		f.mu.Lock()
		f.violation = err
		f.mu.Unlock()
	}
	return a, nil
}

// userinfoRE matches the password of a URL's user info.
var userinfoRE = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*):[^@\s/]*@`)

// explainNATS is the error Main prints: a permission the NATS server
// refused named as such (nats.go reports it apart from the request that
// then times out), and no URL's password.
func explainNATS(e *env, err error) string {
	e.nats.mu.Lock()
	v := e.nats.violation
	e.nats.mu.Unlock()
	if v != nil && !errors.Is(err, bus.ErrPermission) {
		id := bus.Auth{Identity: e.nats.identity, Creds: e.nats.creds, NKey: e.nats.nkey}.IdentityName()
		if id == "" {
			id = "this client"
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (NATS identity %s)", v, id)
		} else {
			err = fmt.Errorf("%w (NATS identity %s); then: %w", v, id, err)
		}
	}
	return userinfoRE.ReplaceAllString(err.Error(), "$1:REDACTED@")
}

func authCmd(e *env) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "auth",
		Short: "Identities and NATS permissions of a secured fleet",
	})
	cmd.AddCommand(authInitCmd(e))
	return cmd
}

func authInitCmd(e *env) *cobra.Command {
	var (
		dir, ns string
		tenants []string
		force   bool
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "init --dir DIR",
		Short: "Make an nkey per fleet identity and the nats-server authorization that gives each least privilege",
		Long: `auth init writes, in DIR, an nkey seed (0600) per identity of the fleet: coordinator,
voter, judge, approver, api (maker serve) and admin, and DIR/auth.conf: the nats-server
authorization block granting each only what its role needs (docs/security.md). Include
auth.conf in nats-server.conf, then run each role with --nats-nkey DIR/<identity>.nk.

Tenants get no NATS identity: the bus is the fleet's private network. They come in through
maker serve with an API key (maker keys create --tenant T) and use the CLI with --api URL
--api-key KEY (or $MAKER_API_URL and $MAKER_API_KEY).

Run it again at any time: seeds that exist are kept (--force makes new ones: a rotation),
auth.conf is rewritten.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(tenants) > 0 {
				return usagef("--tenant: tenants have no NATS identity; give each an API key (maker keys create --tenant %s) "+
					"and let it use maker serve (maker submit --api URL --api-key KEY); see docs/security.md", tenants[0])
			}
			if dir == "" {
				return usagef("--dir is required")
			}
			res, err := auth.Init(auth.InitConfig{Dir: dir, Namespace: bus.Namespace(ns), Force: force})
			if err != nil {
				if errors.Is(err, auth.ErrInit) && len(ns) > 0 {
					return usageError{err}
				}
				return err
			}
			for _, f := range res.FormerTenantSeeds {
				fmt.Fprintf(e.stderr, "maker: %s is a tenant identity of an earlier release: auth.conf no longer names it, so it connects to nothing; delete it and give the tenant an API key\n", f)
			}
			return output(e.stdout, asJSON, res, func(io.Writer) { printInit(e, res) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "dir", "", "directory for the seeds and auth.conf (created 0700)")
	fl.StringVar(&ns, "namespace", string(bus.DefaultNamespace), "namespace of the fleet the permissions are for")
	fl.StringArrayVar(&tenants, "tenant", nil, "refused: tenants use API keys, not NATS identities")
	_ = fl.MarkHidden("tenant")
	fl.BoolVar(&force, "force", false, "make new seeds for every identity, replacing those in --dir")
	fl.BoolVar(&asJSON, "json", false, "print the identities and their permissions as JSON")
	return cmd
}

func printInit(e *env, res auth.InitResult) {
	w := e.stdout
	fmt.Fprintf(w, "Wrote %s (namespace %s) and a seed per identity (0600):\n\n", res.ConfigFile, res.Namespace)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, id := range res.Identities {
		what := "kept"
		if id.Created {
			what = "created"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", id.Name, what, id.SeedFile, id.PublicKey)
	}
	_ = tw.Flush()
	seed := func(id string) string { return filepath.Join(filepath.Dir(res.ConfigFile), id+auth.SeedExt) }
	fmt.Fprintf(w, `
Next (docs/security.md, "Running a fleet secured"):
  1. In nats-server.conf, next to jetstream {}:  include %q   then restart (or reload) nats-server.
     (nats-server reads an include path relative to nats-server.conf's directory, even one starting
     with /: run auth init with --dir that directory, or give the path to %s from there.)
  2. As the admin: the topology and the fleet's sample capacity (voters x --concurrency), which
     tenants share fairly:
       maker topology create --nats nats://HOST:4222 --nats-nkey %s
       maker quota set --fleet --max-inflight N --nats nats://HOST:4222 --nats-nkey %s
  3. Run each role on its own identity (or set MAKER_NATS_NKEY); add --nats-tls-* for TLS:
       maker coordinator --nats nats://HOST:4222 --nats-nkey %s --redis redis://HOST:6379
       maker voter       --nats nats://HOST:4222 --nats-nkey %s --llm-base-url URL --model M
       maker judge       --nats nats://HOST:4222 --nats-nkey %s --config judge.yaml
       maker serve       --nats nats://HOST:4222 --nats-nkey %s --redis redis://HOST:6379 --addr :8000
  4. Tenants have no seed: give each an API key, and they use maker serve:
       maker keys create --tenant T --nats nats://HOST:4222 --nats-nkey %s
       maker submit --api http://HOST:8000 --api-key KEY --task hanoi --disks 4 --wait
  5. Give each seed only to whoever runs that role; %s (decisions, approvals) to the people
     who decide, %s (everything) to the operator.
`, "./"+auth.ConfigFile, res.ConfigFile, seed(auth.Admin), seed(auth.Admin),
		seed(auth.Coordinator), seed(auth.Voter), seed(auth.Judge), seed(auth.API), seed(auth.Admin),
		seed(auth.Approver), seed(auth.Admin))
}
