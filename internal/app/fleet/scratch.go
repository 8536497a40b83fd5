package fleet

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// storePrefix starts the name of a throwaway nats-server store:
// maker-nats-<pid>-<random>.
const storePrefix = "maker-nats-"

// removeStaleStores removes the throwaway stores of runs that died without
// cleaning up (killed with SIGKILL, say): maker-nats-<pid>-* whose process
// is gone. On tmpfs they would hold memory until reboot.
func removeStaleStores(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), storePrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil && p.Signal(syscall.Signal(0)) == nil {
			continue // its run is still going
		}
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// scratchDir is where a temporary store goes: /dev/shm when it is a
// writable directory, else the system temp dir.
func scratchDir() string {
	const shm = "/dev/shm"
	if fi, err := os.Stat(shm); err == nil && fi.IsDir() {
		if f, err := os.CreateTemp(shm, "maker-probe-"); err == nil {
			name := f.Name()
			_ = f.Close()
			_ = os.Remove(name)
			return shm
		}
	}
	return os.TempDir()
}
