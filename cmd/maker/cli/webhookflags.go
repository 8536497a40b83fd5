package cli

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/topology"
	"github.com/makerfleet/makerfleet/internal/webhook"
)

// webhookFlags configure the webhook deliveries a server makes.
type webhookFlags struct {
	off          bool
	secretFile   string
	allow        string
	allowPrivate bool
	cfg          webhook.Config
}

func (w *webhookFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&w.off, "no-webhooks", false, "make no webhook deliveries here (another maker serve makes them; they wait for one)")
	fl.StringVar(&w.secretFile, "webhook-secret-file", envOr("MAKER_WEBHOOK_SECRET_FILE", ""),
		"file holding the master secret tenants' webhook keys derive from (at least 16 bytes, or whsec_<base64>); "+
			"default: one made once and kept in the fleet's webhooks bucket [$MAKER_WEBHOOK_SECRET_FILE]")
	fl.StringVar(&w.allow, "webhook-allow", envOr("MAKER_WEBHOOK_ALLOW", ""),
		"CIDR prefixes or addresses webhooks may reach although private, loopback or link-local (comma separated) [$MAKER_WEBHOOK_ALLOW]")
	fl.BoolVar(&w.allowPrivate, "webhook-allow-private", false, "let webhooks reach any address, private, loopback and the fleet's own included")
	fl.DurationVar(&w.cfg.Timeout, "webhook-timeout", 10*time.Second, "bound on one webhook attempt")
	fl.IntVar(&w.cfg.MaxAttempts, "webhook-max-attempts", 12, "attempts of a webhook delivery before it is given up")
	fl.DurationVar(&w.cfg.InitialBackoff, "webhook-backoff", 5*time.Second, "wait after a first failed attempt, doubled after each")
	fl.DurationVar(&w.cfg.MaxBackoff, "webhook-max-backoff", 10*time.Minute, "longest wait between two attempts")
	fl.IntVar(&w.cfg.Concurrency, "webhook-concurrency", 8, "webhook deliveries made at once")
}

// deliverer is the server's webhook deliverer (nil with --no-webhooks)
// and the tenants' secrets, on topo; own and metricsAddr are the
// server's own listen addresses, which deliveries may not reach unless
// allowed.
func (w *webhookFlags) deliverer(ctx context.Context, topo *topology.Topology, log *slog.Logger, own net.Addr, metricsAddr string,
) (*webhook.Deliverer, func(tenant string) string, error) {
	var given []byte
	if w.secretFile != "" {
		data, err := os.ReadFile(w.secretFile)
		if err != nil {
			return nil, nil, usagef("--webhook-secret-file: %v", err)
		}
		data = bytes.TrimSpace(data)
		if s := string(data); strings.HasPrefix(s, webhook.SecretPrefix) {
			if data, err = webhook.ParseSecret(s); err != nil {
				return nil, nil, usagef("--webhook-secret-file: %v", err)
			}
		}
		if len(data) < 16 {
			return nil, nil, usagef("--webhook-secret-file: the secret must be at least 16 bytes, got %d", len(data))
		}
		given = data
	}
	master, err := webhook.MasterSecret(ctx, topo.Webhooks, given)
	if err != nil {
		return nil, nil, err
	}
	secret := func(tenant string) string { return webhook.Secret(webhook.TenantKey(master, tenant)) }
	if w.off {
		return nil, secret, nil
	}
	allow, err := webhook.ParseAllow(w.allow)
	if err != nil {
		return nil, nil, usagef("--webhook-allow: %v", err)
	}
	g := &webhook.Guard{AllowPrivate: w.allowPrivate, Allow: allow, Own: webhook.OwnAddrs(own)}
	if metricsAddr != "" {
		if ta, err := net.ResolveTCPAddr("tcp", metricsAddr); err == nil {
			if ta.IP == nil {
				ta.IP = net.IPv4zero // :PORT listens on every interface
			}
			g.Own = append(g.Own, webhook.OwnAddrs(ta)...)
		}
	}
	cfg := w.cfg
	cfg.Master, cfg.Guard, cfg.Logger = master, g, log
	d, err := webhook.New(topo, cfg)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("webhooks: %w", err)}
	}
	return d, secret, nil
}
