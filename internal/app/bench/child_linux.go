package bench

import "syscall"

// childAttr puts a child in a process group of its own and has the kernel
// kill it when the bench dies (Pdeathsig), so a bench killed with SIGKILL
// leaves no fleet behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// processAlive reports whether pid is a live process (one of another user
// counts as alive: EPERM).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
