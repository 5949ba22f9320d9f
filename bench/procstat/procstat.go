// Package procstat reads a process's CPU time and memory from /proc, and the
// size of a directory tree, for the benchmark harness. Linux only.
package procstat

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat. It is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// CPU is a process's CPU time in seconds.
type CPU struct {
	User, System float64
	// Children is the CPU time of children the process has waited for
	// (cutime + cstime): PostgreSQL's exited backends, for instance.
	Children float64
}

// Total is user + system + waited-for children.
func (c CPU) Total() float64 { return c.User + c.System + c.Children }

// Sub is the CPU time spent between two readings.
func (c CPU) Sub(earlier CPU) CPU {
	return CPU{User: c.User - earlier.User, System: c.System - earlier.System, Children: c.Children - earlier.Children}
}

// ReadCPU reads /proc/<pid>/stat.
func ReadCPU(pid int) (CPU, error) {
	fields, err := statFields(pid)
	if err != nil {
		return CPU{}, err
	}
	// After "pid (comm)": field 3 is state; utime, stime, cutime, cstime are
	// fields 14-17 (1-based), so 11-14 of the slice that starts at field 3.
	if len(fields) < 15 {
		return CPU{}, fmt.Errorf("procstat: /proc/%d/stat has %d fields", pid, len(fields))
	}
	num := func(i int) float64 {
		v, _ := strconv.ParseFloat(fields[i], 64)
		return v / clockTicks
	}
	return CPU{User: num(11), System: num(12), Children: num(13) + num(14)}, nil
}

// statFields returns the fields of /proc/<pid>/stat after the command name
// (which may contain spaces and parentheses).
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, fmt.Errorf("procstat: %w", err)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("procstat: /proc/%d/stat: no command name", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

// parentOf returns the parent pid of pid.
func parentOf(pid int) (int, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(fields[1])
}

// ReadTreeCPU is the CPU time of pid plus that of its live children (one
// level down) and of its waited-for children: a PostgreSQL postmaster and
// its backends.
func ReadTreeCPU(pid int) (CPU, error) {
	total, err := ReadCPU(pid)
	if err != nil {
		return CPU{}, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return CPU{}, fmt.Errorf("procstat: %w", err)
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parent, err := parentOf(child); err != nil || parent != pid {
			continue
		}
		c, err := ReadCPU(child)
		if err != nil {
			continue // exited meanwhile: its time is in the parent's Children now
		}
		total.User += c.User
		total.System += c.System
		total.Children += c.Children
	}
	return total, nil
}

// Memory is a process's resident set, now and at its peak, in bytes.
type Memory struct {
	RSS, PeakRSS int64
}

// ReadMemory reads VmRSS and VmHWM from /proc/<pid>/status.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("procstat: %w", err)
	}
	var m Memory
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			m.RSS = kb << 10
		case "VmHWM":
			m.PeakRSS = kb << 10
		}
	}
	return m, nil
}

// DirSize is the disk space the regular files under dir use (allocated
// blocks, as du counts: Kafka's preallocated sparse index files count for
// what they hold, not their length).
func DirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += info.Size()
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("procstat: size of %s: %w", dir, err)
	}
	return n, nil
}
