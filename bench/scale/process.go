package scale

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on every Linux the Go
// toolchain supports.
const clockTicks = 100

// PeakRSS is the process's peak resident set size (VmHWM), in bytes.
func PeakRSS(pid int) (int64, error) { return statusField(pid, "VmHWM:") }

// RSS is the process's resident set size now (VmRSS), in bytes.
func RSS(pid int) (int64, error) { return statusField(pid, "VmRSS:") }

func statusField(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// CPU is the user and system CPU time the process has used.
func CPU(pid int) (time.Duration, error) {
	user, system, err := CPUTimes(pid)
	return user + system, err
}

// CPUTimes is a process's CPU time so far, in user space and in the kernel (page faults,
// system calls) apart.
func CPUTimes(pid int) (user, system time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces; the fields counted from after its ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return time.Duration(utime) * time.Second / clockTicks, time.Duration(stime) * time.Second / clockTicks, nil
}
