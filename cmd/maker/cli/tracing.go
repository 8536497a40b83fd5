package cli

import (
	"context"
	"log/slog"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"

	"github.com/makerfleet/makerfleet/internal/tracing"
)

// tracingFlags adds --otlp-endpoint and --trace-sample-ratio to the role
// command cmd and wraps its RunE: with an endpoint (the flag, else
// $MAKER_OTLP_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT) spans of this
// process are exported over OTLP/HTTP as service maker-<role>, flushed at
// exit; without one tracing stays off and nothing is installed. Call it
// after RunE is set.
func tracingFlags(e *env, cmd *cobra.Command, role string) {
	var (
		endpoint string
		ratio    float64
	)
	fl := cmd.Flags()
	fl.StringVar(&endpoint, "otlp-endpoint", envOr("MAKER_OTLP_ENDPOINT", ""),
		"export OpenTelemetry traces to this OTLP/HTTP collector, e.g. http://127.0.0.1:4318 (spans go to /v1/traces); off when empty [$MAKER_OTLP_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT]")
	fl.Float64Var(&ratio, "trace-sample-ratio", 1,
		"with --otlp-endpoint: fraction of steps traced, in (0, 1] (a voter follows the coordinator's choice) [$MAKER_TRACE_SAMPLE_RATIO]")
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if v := os.Getenv("MAKER_TRACE_SAMPLE_RATIO"); v != "" && !cmd.Flags().Changed("trace-sample-ratio") {
			r, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return usagef("$MAKER_TRACE_SAMPLE_RATIO: %v", err)
			}
			ratio = r
		}
		if !(ratio > 0 && ratio <= 1) {
			return usagef("--trace-sample-ratio must be above 0 and at most 1, got %v", ratio)
		}
		if endpoint == "" {
			endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		}
		if endpoint == "" {
			return run(cmd, args)
		}
		if _, err := tracing.TracesURL(endpoint); err != nil {
			return usagef("--otlp-endpoint: %v", err)
		}
		log := e.logger(slog.LevelInfo)
		var id string
		if f := cmd.Flags().Lookup("id"); f != nil {
			id = f.Value.String()
		}
		// The SDK's own errors (a collector that cannot be reached) go to
		// the log, not to the standard logger.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
		shutdown, err := tracing.Setup(cmd.Context(), tracing.Config{
			Endpoint: endpoint, ServiceName: "maker-" + role, InstanceID: id, Version: Version, SampleRatio: ratio,
		})
		if err != nil {
			return usageError{err}
		}
		url, _ := tracing.TracesURL(endpoint)
		log.Info("tracing on", "otlp", url, "sample_ratio", ratio)
		defer func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), tracing.FlushTimeout)
			defer cancel()
			if err := shutdown(ctx); err != nil {
				log.Warn("tracing: flush at exit", "err", err)
			}
		}()
		return run(cmd, args)
	}
}
