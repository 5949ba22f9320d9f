// Package memlimit gives the Go runtime a soft memory limit below the
// container's hard one.
//
// A worker's memory peaks while it restores tables from the changelog: the
// fetched records and LevelDB's compaction buffers become garbage at once,
// and with the default GOGC the heap may grow to twice what is live before
// the collector runs. A restore's peak is well above the settled memory
// (docs/benchmarks.md gives both): under a container limit between the two
// the kernel would kill the worker in the middle of every rebalance. The runtime does not read the cgroup's limit by itself (unlike
// GOMAXPROCS, which follows the CPU quota since Go 1.25); Apply reads it and
// sets the soft limit (runtime/debug.SetMemoryLimit) to a share of it, so
// the collector works harder near the limit instead of the process being
// killed. GOMEMLIMIT, when set, wins: the runtime has applied it.
//
// The cgroup is read by github.com/KimMachineGun/automemlimit, which finds
// the cgroup file systems through /proc/self/mountinfo: a reader that
// assumes the whole hierarchy at /sys/fs/cgroup misses the limit when a
// container sees just a subtree of it and the process sits in a cgroup
// below that subtree's root. Only its reading is used, not its Set: Set
// also obeys the AUTOMEMLIMIT environment variable, a second knob beside
// --memory-limit-ratio that an operator would not look for, and it reports
// only the soft limit, where the worker logs the hard one too. (Its root
// package must not be imported either: its init sets the limit on its own.)
package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime/debug"

	aml "github.com/KimMachineGun/automemlimit/memlimit"
)

// Source tells where the soft limit came from.
type Source string

const (
	FromEnv    Source = "GOMEMLIMIT"
	FromCgroup Source = "cgroup"
	None       Source = "none" // no limit found, or disabled
)

// Result is what Apply did.
type Result struct {
	Source Source
	Limit  int64 // the soft limit set or found in GOMEMLIMIT (bytes); 0 with None
	Cgroup int64 // the cgroup's hard limit (bytes); 0 when unlimited or not read
}

// Apply sets the runtime's soft memory limit to ratio times the memory
// limit of the cgroup this process is in (CgroupLimit). ratio 0 disables
// it; GOMEMLIMIT in the environment (getenv) leaves the runtime's limit
// alone.
func Apply(getenv func(string) string, ratio float64) (Result, error) {
	return apply(aml.FromCgroup, getenv, ratio)
}

// apply is Apply with the cgroup reader as a parameter, for the tests.
func apply(read func() (uint64, error), getenv func(string) string, ratio float64) (Result, error) {
	if ratio < 0 || ratio > 1 {
		return Result{Source: None}, fmt.Errorf("ratio %v: want 0 (off) to 1", ratio)
	}
	if getenv("GOMEMLIMIT") != "" {
		return Result{Source: FromEnv, Limit: debug.SetMemoryLimit(-1)}, nil
	}
	if ratio == 0 {
		return Result{Source: None}, nil
	}
	hard, err := cgroupLimit(read)
	if err != nil || hard == 0 {
		return Result{Source: None}, err
	}
	soft := int64(float64(hard) * ratio)
	debug.SetMemoryLimit(soft)
	return Result{Source: FromCgroup, Limit: soft, Cgroup: hard}, nil
}

// CgroupLimit returns the memory limit (bytes) of this process's cgroup, v2
// or v1, the smallest of its own and its ancestors'; 0 when there is none:
// unlimited, not in a cgroup, no /proc, not Linux.
func CgroupLimit() (int64, error) {
	return cgroupLimit(aml.FromCgroup)
}

func cgroupLimit(read func() (uint64, error)) (int64, error) {
	n, err := read()
	switch {
	case errors.Is(err, aml.ErrNoLimit), errors.Is(err, aml.ErrNoCgroup),
		errors.Is(err, aml.ErrCgroupsNotSupported), errors.Is(err, fs.ErrNotExist):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("automemlimit: %w", err)
	case n > 1<<62: // no limit in all but name (cgroup v1 reports one near MaxInt64)
		return 0, nil
	}
	return int64(n), nil
}
