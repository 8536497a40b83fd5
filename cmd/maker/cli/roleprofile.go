package cli

import (
	"errors"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// cpuProfileFlag adds --cpuprofile FILE to the long-running command cmd
// (a role, the simulated model) and wraps its RunE: the process's CPU
// profile is written to FILE from the start until the command returns,
// which for a role is its stop on SIGTERM or SIGINT (maker bench
// --processes --cpuprofile-dir profiles every role of its fleet so). Call
// it after RunE is set.
func cpuProfileFlag(cmd *cobra.Command) {
	var path string
	cmd.Flags().StringVar(&path, "cpuprofile", "", "write a CPU profile of this process to FILE until it stops (go tool pprof FILE)")
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) (err error) {
		if path == "" {
			return run(cmd, args)
		}
		f, err := os.Create(path)
		if err != nil {
			return usagef("--cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
		}()
		return run(cmd, args)
	}
}
