package cli

import (
	"os"
	"runtime/debug"
)

// DefaultGOGC is the garbage collector's target the maker binary runs with
// when GOGC is not in its environment: 200 (the heap may grow to three
// times what is live between collections) rather than Go's 100. Every role
// allocates fast around a small live heap (a sample's prompt, its model
// call's JSON, its messages), so at 100 it collects often; at 200, 100
// jobs in one process went 7 to 19 % faster on two CPUs, for a few MiB more a
// role and more where the live heap is large (maker run's 20-disk job peaked at
// 571 MiB against 327; docs/benchmarks.md "Sixth pass"). GOGC in the
// environment (100 for Go's default, off, or any other) is left as it is,
// and GOMEMLIMIT still bounds the heap.
const DefaultGOGC = 200

// setGCDefault applies DefaultGOGC unless GOGC is set.
func setGCDefault() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGOGC)
	}
}
