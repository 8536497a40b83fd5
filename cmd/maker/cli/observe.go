package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/bus"
	"github.com/makerfleet/makerfleet/internal/metrics"
)

// What a service shows an operator: its metrics and health endpoints
// (--metrics-addr), its log format (--log-format) and its NATS connection
// name.

// logFormat is --log-format: text or json.
type logFormat string

const (
	logText logFormat = "text"
	logJSON logFormat = "json"
)

func (f *logFormat) Set(s string) error {
	switch v := logFormat(strings.ToLower(strings.TrimSpace(s))); v {
	case logText, logJSON:
		*f = v
		return nil
	}
	return fmt.Errorf("log format %q: want text or json", s)
}

func (f *logFormat) String() string { return string(*f) }
func (f *logFormat) Type() string   { return "text|json" }

// logFormatFlag adds the root's --log-format, its default from
// $MAKER_LOG_FORMAT (checked by checkLogFormatEnv).
func (e *env) logFormatFlag(root *cobra.Command) {
	e.logFormat = logText
	if v := os.Getenv("MAKER_LOG_FORMAT"); v != "" {
		e.logFormat = logFormat(v) // checked before the command runs
	}
	root.PersistentFlags().Var(&e.logFormat, "log-format", "log format: text or json (one JSON object a line) [$MAKER_LOG_FORMAT]")
}

// checkLogFormatEnv refuses a $MAKER_LOG_FORMAT that is neither text nor
// json (a flag given on the command line is checked as it is parsed).
func checkLogFormatEnv() error {
	if v := os.Getenv("MAKER_LOG_FORMAT"); v != "" {
		var f logFormat
		if err := f.Set(v); err != nil {
			return usagef("$MAKER_LOG_FORMAT: %v", err)
		}
	}
	return nil
}

// checkMetricsAddr refuses a command's --metrics-addr (or
// $MAKER_METRICS_ADDR) that is not HOST:PORT, before anything connects.
func checkMetricsAddr(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("metrics-addr")
	if f == nil || f.Value.String() == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(f.Value.String())
	if err == nil {
		var n uint64
		if n, err = strconv.ParseUint(port, 10, 16); err == nil && port != strconv.FormatUint(n, 10) {
			err = fmt.Errorf("port %q", port)
		}
	}
	if err != nil {
		return usagef("--metrics-addr %q is not HOST:PORT (port 0..65535): %v", f.Value.String(), err)
	}
	return nil
}

// startMetrics serves reg on addr until ctx ends and says where on stderr;
// nothing when addr is empty. The returned stop is never nil.
func startMetrics(ctx context.Context, e *env, log *slog.Logger, addr string, reg *metrics.Registry, checks ...metrics.Check) (func(), error) {
	if addr == "" || reg == nil {
		return func() {}, nil
	}
	srv, err := metrics.Start(ctx, addr, reg, log, checks...)
	if err != nil {
		return nil, usagef("--metrics-addr: %v", err)
	}
	log.Info("metrics listening", "url", srv.URL(), "healthz", srv.BaseURL()+"/healthz", "readyz", srv.BaseURL()+"/readyz")
	fmt.Fprintf(e.stderr, "metrics listening on %s\n", srv.URL())
	return func() { _ = srv.Close() }, nil
}

// newRoleMetrics is a role's registry, nil when addr is empty (no
// metrics kept at all).
func newRoleMetrics(addr, role string) *metrics.Registry {
	if addr == "" {
		return nil
	}
	return metrics.NewRegistry(role, Version)
}

// queueConsumers are the consumers whose lag coordinators, voters and
// serve report: the samples queue's and the jobs queue's.
func queueConsumers(ns bus.Namespace) []metrics.Consumer {
	return []metrics.Consumer{
		{Stream: ns.SamplesStream(), Name: bus.ConsumerVoters},
		{Stream: ns.JobsStream(), Name: bus.ConsumerCoordinators},
	}
}

// natsReady is ready while nc is connected.
func natsReady(nc *nats.Conn) metrics.Check {
	return metrics.Check{Name: "nats", Fn: func(context.Context) error {
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("not connected (%s)", st)
		}
		return nil
	}}
}

// redisReady is ready while Redis answers a ping.
func redisReady(rdb redis.UniversalClient) metrics.Check {
	return metrics.Check{Name: "redis", Fn: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }}
}

// topologyReady is ready once the streams exist (a coordinator or maker
// topology create makes them).
func topologyReady(js jetstream.JetStream, streams ...string) metrics.Check {
	return metrics.Check{Name: "topology", Fn: func(ctx context.Context) error {
		for _, s := range streams {
			if _, err := js.Stream(ctx, s); err != nil {
				if errors.Is(err, jetstream.ErrStreamNotFound) {
					return fmt.Errorf("stream %s not found (no coordinator has created the topology yet?)", s)
				}
				return fmt.Errorf("stream %s: %w", s, err)
			}
		}
		return nil
	}}
}

// startRoleMetrics serves a coordinator's, voter's or serve's metrics:
// the queue lag of the default namespace's consumers, ready while NATS is
// connected, the topology exists, (given) Redis answers and every extra
// check passes (the voter: its provider serves its model).
func startRoleMetrics(ctx context.Context, e *env, log *slog.Logger, addr string, reg *metrics.Registry, nc *nats.Conn, rdb redis.UniversalClient, extra ...metrics.Check) (func(), error) {
	if reg == nil {
		return func() {}, nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("metrics: jetstream: %w", err)
	}
	ns := bus.DefaultNamespace
	reg.QueueLag(js, queueConsumers(ns)...)
	checks := []metrics.Check{natsReady(nc)}
	if rdb != nil {
		checks = append(checks, redisReady(rdb))
	}
	checks = append(checks, topologyReady(js, ns.JobsStream(), ns.SamplesStream()))
	return startMetrics(ctx, e, log, addr, reg, append(checks, extra...)...)
}
