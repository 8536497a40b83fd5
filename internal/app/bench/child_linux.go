package bench

import "syscall"

// childAttr puts a child in a process group of its own and has the kernel
// kill it when the bench dies (Pdeathsig), so a bench killed with SIGKILL
// leaves no fleet behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
