package bench

import (
	"math"
	"runtime/metrics"
)

// GCPercent is the garbage collector's target now (GOGC; -1: off), as the
// reports print it: the maker binary sets its own default (cli.DefaultGOGC).
func GCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[0].Value.Uint64() > math.MaxInt32 {
		return -1
	}
	return int(s[0].Value.Uint64())
}
