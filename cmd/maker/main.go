// Command maker is makerfleet's one binary: every role of the fleet, job
// submission, planning and single-process runs, as subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/makerfleet/makerfleet/cmd/maker/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
