package step

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

// CrashPoint is a parsed Config.CrashAt; the zero value crashes nowhere.
type CrashPoint struct {
	Point string
	Step  int64
}

// crash appends the crash action to acts when the job reaches point at
// the configured step (the shell calls Config.Crash there, which in the
// CLI exits the process as a SIGKILL would).
func (m *Machine) crash(acts []Action, point string, step int64) []Action {
	if m.crashAt.Point == point && m.crashAt.Step == step {
		return append(acts, Action{Kind: ActCrash, Point: point})
	}
	return acts
}
