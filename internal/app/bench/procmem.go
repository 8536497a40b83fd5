package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// procMem is a process's memory as /proc/PID/status says, in KiB: its
// resident set now (VmRSS) and its peak (VmHWM, the resident set's high
// water mark since the process started).
type procMem struct {
	RSS, HWM int64
}

// readProcMem reads pid's memory from /proc (pid "self": this process).
func readProcMem(pid string) (procMem, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return procMem{}, err
	}
	return parseProcStatus(b)
}

// parseProcStatus reads VmRSS and VmHWM ("VmRSS:	  123456 kB") from a
// /proc/PID/status file.
func parseProcStatus(b []byte) (procMem, error) {
	var m procMem
	var seen int
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		var dst *int64
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			dst = &m.RSS
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			dst = &m.HWM
		default:
			continue
		}
		f := bytes.Fields(line)
		if len(f) != 3 || string(f[2]) != "kB" {
			return procMem{}, fmt.Errorf("/proc status: unexpected line %q", line)
		}
		n, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil || n < 0 {
			return procMem{}, fmt.Errorf("/proc status: unexpected line %q", line)
		}
		*dst = n
		seen++
	}
	if seen != 2 {
		// A zombie's status has no Vm lines: the process is gone.
		return procMem{}, fmt.Errorf("/proc status: no VmRSS and VmHWM (the process has exited?)")
	}
	return m, nil
}

// slope is the least-squares fit's slope of ys against xs, and whether
// there is one: at least 3 points, with xs not all the same.
func slope(xs, ys []float64) (float64, bool) {
	n := float64(len(xs))
	if len(xs) < 3 || len(xs) != len(ys) {
		return 0, false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for i := range xs {
		dx := xs[i] - mx
		sxy += dx * (ys[i] - my)
		sxx += dx * dx
	}
	if sxx == 0 {
		return 0, false
	}
	return sxy / sxx, true
}
