//go:build !linux

package bench

import "syscall"

// childAttr: bench --processes reads /proc, which only Linux has; it
// refuses to start elsewhere (procMem), so the defaults do.
func childAttr() *syscall.SysProcAttr { return nil }

// processAlive: elsewhere every owner counts as alive, so nothing is
// swept (sweepStale).
func processAlive(int) bool { return true }
