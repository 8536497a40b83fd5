package bench

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A fleet's directory (logs, and the servers' stores, which grow to
// gigabytes on a long run) is removed when the bench ends, but a bench
// killed with SIGKILL cannot: its children die with it (Pdeathsig), its
// directory stays. So the directory names its owner while it runs, and
// the next bench removes the stores of directories whose owner is gone.

// fleetDirPattern matches the fleets' directories in the temp directory.
const fleetDirPattern = "maker-bench-processes-*"

// ownerFile holds the pid of the bench that owns a fleet directory, while
// it runs; a directory without it (kept with --keep, or cleaned up) is not
// swept.
const ownerFile = "bench.pid"

// claimDir marks dir as this process's while it runs.
func claimDir(dir string) error {
	return os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

// releaseDir unmarks dir: what stays in it stays on purpose.
func releaseDir(dir string) { _ = os.Remove(filepath.Join(dir, ownerFile)) }

// sweepStale removes the stores of the fleet directories under tmp whose
// bench is gone, keeping their logs (what happened to that run), and says
// so on progress.
func sweepStale(tmp string, progress io.Writer) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, fleetDirPattern))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(dir, "nats"))
		_ = os.RemoveAll(filepath.Join(dir, "redis"))
		releaseDir(dir)
		progressf(progress, "bench --processes: removed the stores in %s, left by a bench (pid %d) that was killed; its logs stay\n", dir, pid)
	}
}
