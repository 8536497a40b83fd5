//go:build linux

package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSweepStale: the stores of a fleet directory whose bench was killed
// are removed at the next bench, its logs kept; a directory of a bench
// still running, one kept on purpose (no owner) and anything else in the
// temp directory are left alone.
func TestSweepStale(t *testing.T) {
	tmp := t.TempDir()
	// A pid no process holds: a child that has exited and been reaped.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	if processAlive(dead) {
		t.Skipf("pid %d was reused at once", dead)
	}
	fleetDir := func(name string, owner int) string {
		dir := filepath.Join(tmp, "maker-bench-processes-"+name)
		for _, sub := range []string{"nats/jetstream", "redis", "logs"} {
			if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if owner != 0 {
			if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(owner)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	killed := fleetDir("killed", dead)
	running := fleetDir("running", os.Getppid()) // a live process that is not this one
	kept := fleetDir("kept", 0)
	other := filepath.Join(tmp, "something-else", "nats")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sweepStale(tmp, &out)

	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if exists(filepath.Join(killed, "nats")) || exists(filepath.Join(killed, "redis")) || exists(filepath.Join(killed, ownerFile)) {
		t.Error("the killed bench's stores (or its owner file) are still there")
	}
	if !exists(filepath.Join(killed, "logs")) {
		t.Error("the killed bench's logs were removed")
	}
	for _, dir := range []string{running, kept} {
		if !exists(filepath.Join(dir, "nats", "jetstream")) || !exists(filepath.Join(dir, "redis")) {
			t.Errorf("%s: swept, but its bench runs or it was kept", filepath.Base(dir))
		}
	}
	if !exists(other) {
		t.Error("a directory that is not a fleet's was touched")
	}
	if got := out.String(); strings.Count(got, "removed the stores") != 1 || !strings.Contains(got, killed) {
		t.Errorf("progress %q, want one line naming %s", got, killed)
	}
}

// TestClaimDir: a fleet directory names its owner while the bench runs,
// and not once it is released.
func TestClaimDir(t *testing.T) {
	dir := t.TempDir()
	if err := claimDir(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("owner file %q, %v; want this pid", b, err)
	}
	releaseDir(dir)
	if _, err := os.Stat(filepath.Join(dir, ownerFile)); !os.IsNotExist(err) {
		t.Errorf("owner file still there after release: %v", err)
	}
}
