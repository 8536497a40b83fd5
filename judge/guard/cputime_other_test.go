//go:build !unix

package guard

import "time"

// cpuTime is not measured here: BenchmarkSecretScan reports no cpu-ns/op.
func cpuTime() time.Duration { return 0 }
