// Package cli is the `maker` command line: one binary whose subcommands run
// each role of the fleet (coordinator, voter, judge, simllm), submit jobs,
// ask for break glass (breakglass, mcp), plan runs, and run a whole fleet in
// one process (run, bench).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/makerfleet/makerfleet/internal/metrics"
)

// Version is set at build time with -ldflags "-X ...cli.Version=...".
var Version = "dev"

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1 // the command failed while running
	ExitUsage = 2 // bad flags or invalid input; nothing was done
	// ExitInterrupted: SIGINT or SIGTERM ended the command before it was
	// done (128 + SIGINT, the shell's code for Ctrl-C). Services stop on
	// either signal as their normal end and exit 0.
	ExitInterrupted = 130
	// ExitTimeout (runlong.go): maker run's --timeout cancelled the job;
	// its partial report was printed.
)

// usageError marks errors caused by the user's input.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// env holds what every command writes to.
type env struct {
	stdout, stderr io.Writer
	logLevel       string
	logFormat      logFormat     // see observe.go
	httpMetrics    *metrics.HTTP // maker serve's request metrics; nil: none
	nats           natsAuthFlags // see auth.go
}

// Main runs the command line with args (without the program name) and
// returns the exit code. ctx ends when the command is to stop: main cancels
// it on SIGINT and SIGTERM.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	setGCDefault()
	e := &env{stdout: stdout, stderr: stderr}
	root := newRoot(e)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	err := checkLogFormatEnv()
	if err == nil {
		err = root.ExecuteContext(ctx)
	}
	if err == nil {
		return ExitOK
	}
	if ctx.Err() != nil {
		// The signal is why the command failed: its "context canceled"
		// says nothing the user does not know.
		fmt.Fprintln(stderr, "maker: interrupted")
		return ExitInterrupted
	}
	fmt.Fprintln(stderr, "maker:", explainNATS(e, err))
	if errors.As(err, new(errTimedOut)) {
		return ExitTimeout
	}
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		return ExitUsage
	}
	return ExitError
}

// newRoot builds the command tree, writing to e.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "maker",
		Short: "Run very long LLM tasks with (near) zero errors by MAKER voting on a NATS + Redis fleet",
		Long: `maker runs MAKER (Meyerson et al., "Solving a Million-Step LLM Task with Zero Errors"):
a task is split into one-decision steps, each step is sampled from a model again and
again and decided by first-to-ahead-by-k voting, and unreliable samples are red-flagged.

Quick start, nothing else needed:  maker run --task hanoi --disks 10`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	root.PersistentFlags().StringVar(&e.logLevel, "log-level", envOr("MAKER_LOG_LEVEL", ""), "log level: debug, info, warn, error (default info for services, warn otherwise) [$MAKER_LOG_LEVEL]")
	e.logFormatFlag(root)
	e.natsFlags(root)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		runCmd(e), planCmd(e), simllmCmd(e), coordinatorCmd(e), voterCmd(e), submitCmd(e), benchCmd(e),
		jobsCmd(e), statusCmd(e), resultCmd(e), pauseCmd(e), resumeCmd(e), cancelCmd(e), decideCmd(e), dlqCmd(e),
		judgeCmd(e), breakglassCmd(e), mcpCmd(e), taskCmd(e), authCmd(e), topologyCmd(e),
		serveCmd(e),
		batchCmd(e),
		quotaCmd(e),
		pricesCmd(e),
		providersCmd(e),
		budgetCmd(e),
		keysCmd(e),
		upCmd(e),
		retentionCmd(e),
		calibrateCmd(e),
		fleetViewCmd(e),
	)
	return root
}

// subcommandArgs refuses an argument that names none of a command
// group's subcommands (cobra would print the group's help and exit 0).
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set only for the root
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError{errors.New(msg)}
}

// group makes cmd a command group: it refuses unknown subcommands and,
// given none, prints its help.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = subcommandArgs
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	return cmd
}

// go-redis logs on its own, to os.Stderr, what its connection pool
// retries ("redis: ... pool.go:770: ... failed to dial"): lines in
// another format, repeated, ahead of the command's own error. They go to
// our log at debug level instead, through the logger of the latest
// command (one per process outside tests), made once its flags are parsed:
// go-redis logs from its own goroutines.
var (
	redisLogOnce sync.Once
	redisLog     atomic.Pointer[slog.Logger]
)

type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		l.DebugContext(ctx, "redis: "+strings.TrimSpace(fmt.Sprintf(format, v...)))
	}
}

// routeRedisLog sends go-redis' logs to e's logger; called once the
// command's flags (--log-level) are parsed.
func routeRedisLog(e *env) {
	redisLog.Store(e.logger(slog.LevelWarn))
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{}) })
}

// logger returns a logger on stderr at the chosen level, text or JSON
// (--log-format).
func (e *env) logger(def slog.Level) *slog.Logger {
	lvl := def
	switch strings.ToLower(e.logLevel) {
	case "debug":
		lvl = slog.LevelDebug
	case "info":
		lvl = slog.LevelInfo
	case "warn", "warning":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	}
	if e.logFormat == logJSON {
		return slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: lvl}))
	}
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl}))
}

// apiKeyFromEnv returns the model API key from the environment.
func apiKeyFromEnv() string {
	if k := os.Getenv("MAKER_LLM_API_KEY"); k != "" {
		return k
	}
	return os.Getenv("OPENAI_API_KEY")
}
