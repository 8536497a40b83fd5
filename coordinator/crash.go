package coordinator

import (
	"fmt"
	"strconv"
	"strings"
)

// Crash points: where the fault suite kills a coordinator, to prove a step
// is decided exactly once whatever the moment of death.
const (
	// CrashAfterCount: the deciding vote is counted in Redis, the decision
	// not yet journaled.
	CrashAfterCount = "after-count"
	// CrashAfterJournal: the decision is journaled, the next step not yet
	// published.
	CrashAfterJournal = "after-journal"
	// CrashMidWave: half of a step's first wave is published.
	CrashMidWave = "mid-wave"
)

// crashPoint is a parsed Config.CrashAt; the zero value crashes nowhere.
type crashPoint struct {
	point string
	step  int64
}

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

// crash appends the crash action to acts when the job reaches point at
// the configured step (the shell calls Config.Crash there, which in the
// CLI exits the process as a SIGKILL would).
func (m *machine) crash(acts []action, point string, step int64) []action {
	if m.crashAt.point == point && m.crashAt.step == step {
		return append(acts, action{kind: actCrash, point: point})
	}
	return acts
}
