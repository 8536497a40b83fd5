package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/client/httpapi"
)

// The tenant-facing commands speak to the fleet in one of two ways: on its
// NATS bus (--nats, package client: the fleet's own roles and the
// operator), or through maker serve's HTTP API (--api URL --api-key KEY,
// package client/httpapi: tenants, who have no NATS identity). Each
// command has one RunE and one printer; the ports it uses (ports.go) have
// a NATS adapter (natsports.go) and an HTTP one (apiports.go).

// apiFlags are a command's --api and --api-key.
type apiFlags struct {
	url, key string
}

// apiHelp is the Long text's paragraph on the two modes.
const apiHelp = `
Two ways to reach the fleet: --nats URL talks to its NATS server directly (the fleet's
roles and the operator); --api URL --api-key KEY goes through maker serve's HTTP API, as
a tenant does (tenants have no NATS identity; $MAKER_API_URL and $MAKER_API_KEY set them).
With --api the command never dials NATS and acts as the API key's tenant (an admin key
may name another with --tenant or tenant/id); the output is the same.`

// addAPIFlags adds --api and --api-key to cmd.
func addAPIFlags(cmd *cobra.Command) *apiFlags {
	a := &apiFlags{}
	fl := cmd.Flags()
	fl.StringVar(&a.url, "api", envOr("MAKER_API_URL", ""), "go through maker serve's HTTP API at this URL instead of NATS (e.g. http://127.0.0.1:8000) [$MAKER_API_URL]")
	fl.StringVar(&a.key, "api-key", envOr("MAKER_API_KEY", ""), "with --api: the API key (maker keys create); the command acts as its tenant [$MAKER_API_KEY]")
	return a
}

// apiConflicts are the flags of the NATS (and Redis) way: given
// explicitly, they contradict --api.
var apiConflicts = []string{"nats", "redis", "key-prefix"}

// client returns the HTTP API client when --api is set (flag or
// environment), nil when the command goes through NATS. --api with an
// explicit --nats (or --redis), --api without a key, an --api-key
// without --api, and a malformed URL are usage errors.
func (a *apiFlags) client(cmd *cobra.Command) (*httpapi.Client, error) {
	if a.url == "" {
		if cmd.Flags().Changed("api-key") {
			return nil, usagef("--api-key needs --api URL (or $MAKER_API_URL): the API key is for maker serve's HTTP API")
		}
		return nil, nil
	}
	for _, name := range apiConflicts {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			return nil, usagef("give --api or --%s, not both: --api goes through maker serve's HTTP API and never dials NATS (or Redis)", name)
		}
	}
	if a.key == "" {
		return nil, usagef("--api %s needs an API key: --api-key KEY or $MAKER_API_KEY (maker keys create --tenant T makes one)", redactAPIURL(a.url))
	}
	// No overall timeout (a wait streams for as long as the job runs), but
	// a server that takes a request and never answers is not waited for
	// forever: the longest answer held back on purpose is a break-glass
	// wait of a minute.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 2 * time.Minute
	c, err := httpapi.New(a.url, a.key, httpapi.Options{HTTPClient: &http.Client{Transport: tr}, UserAgent: "maker/" + Version})
	if err != nil {
		return nil, usagef("--api %s: %s", redactAPIURL(a.url), strings.TrimPrefix(err.Error(), httpapi.ErrInvalid.Error()+": "))
	}
	return c, nil
}

// refuseWithAPI is a usage error for each flag of names given explicitly
// with --api: what the API key decides (the tenant, the requester) or the
// API cannot do.
func refuseWithAPI(cmd *cobra.Command, why string, names ...string) error {
	for _, name := range names {
		if cmd.Flags().Changed(name) {
			return usagef("--%s cannot be given with --api: %s", name, why)
		}
	}
	return nil
}

func redactAPIURL(u string) string { return userinfoRE.ReplaceAllString(u, "$1:REDACTED@") }

// apiError is an error answer of the API as the CLI reports it: one line
// saying what the server said. It unwraps to the *httpapi.ProblemError,
// which matches (errors.Is) the sentinels both clients share (package
// apierr), so that a command treats it as it treats the NATS path's
// (clientErr: bad input exits 2 where the NATS path's does).
type apiError struct {
	pe *httpapi.ProblemError
}

func (e *apiError) Unwrap() error { return e.pe }

// Error is the problem's title, detail and failing fields, with the
// HTTP status ("not found: no such job (HTTP 404)"); a refused key says
// which flag gives it.
func (e *apiError) Error() string {
	var b strings.Builder
	title := e.pe.Title
	if title != "" {
		title = strings.ToLower(title[:1]) + title[1:]
	}
	b.WriteString(title)
	if e.pe.Detail != "" {
		if title != "" {
			b.WriteString(": ")
		}
		b.WriteString(e.pe.Detail)
	}
	for _, f := range e.pe.Errors {
		if f.Message != e.pe.Detail {
			fmt.Fprintf(&b, "; %s: %s", orRootPath(f.Path), f.Message)
		}
	}
	fmt.Fprintf(&b, " (HTTP %d)", e.pe.Status)
	switch {
	case errors.Is(e.pe, httpapi.ErrUnauthorized):
		b.WriteString(": check --api-key or $MAKER_API_KEY")
	case errors.Is(e.pe, httpapi.ErrRateLimited) && e.pe.RetryAfter > 0:
		fmt.Fprintf(&b, ": try again in %s", e.pe.RetryAfter)
	}
	return b.String()
}

func orRootPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// apiErr translates an error of the HTTP client: a problem answer into
// an apiError, a server that cannot be reached into one line naming it.
func apiErr(err error) error {
	var pe *httpapi.ProblemError
	if errors.As(err, &pe) {
		return &apiError{pe: pe}
	}
	var ue *url.Error
	if errors.As(err, &ue) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("cannot reach the API (%s %s): %w", ue.Op, redactAPIURL(ue.URL), ue.Err)
	}
	return err
}
