package coordinator

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/makerfleet/makerfleet/internal/core/step"
)

// Crash points: where the fault suite kills a coordinator (the step
// machine's crash points, named here for the coordinator's Config.CrashAt).
const (
	CrashAfterCount   = step.CrashAfterCount
	CrashAfterJournal = step.CrashAfterJournal
	CrashMidWave      = step.CrashMidWave
)

// ParseCrashAt checks a CrashAt value: "<point>:<step>".
func ParseCrashAt(s string) (point string, step int64, err error) {
	point, n, ok := strings.Cut(s, ":")
	if ok {
		step, err = strconv.ParseInt(n, 10, 64)
	}
	switch {
	case !ok || err != nil || step < 0:
		return "", 0, fmt.Errorf("%w: crash point %q is not <point>:<step>", ErrConfig, s)
	case point != CrashAfterCount && point != CrashAfterJournal && point != CrashMidWave:
		return "", 0, fmt.Errorf("%w: unknown crash point %q (want %s, %s or %s)", ErrConfig, point, CrashAfterCount, CrashAfterJournal, CrashMidWave)
	}
	return point, step, nil
}
