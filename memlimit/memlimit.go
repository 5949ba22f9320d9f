// Package memlimit gives the Go runtime a soft memory limit below the
// container's hard one.
//
// A worker's memory peaks while it restores tables from the changelog: the
// fetched records and LevelDB's compaction buffers become garbage at once,
// and with the default GOGC the heap may grow to twice what is live before
// the collector runs. Holding 10M seen IDs, the worker settled at 163 MiB RSS
// but peaked at 247 MiB during the restore (docs/benchmarks.md): under a
// 200 MiB container limit the kernel would kill it in the middle of every
// rebalance. The runtime does not read the cgroup's limit by itself (unlike
// GOMAXPROCS, which follows the CPU quota since Go 1.25); this package reads
// it and sets the soft limit (runtime/debug.SetMemoryLimit) to a share of
// it, so the collector works harder near the limit instead of the process
// being killed. GOMEMLIMIT, when set, wins: the runtime has applied it.
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
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

// unlimitedV1 is where cgroup v1 reports "no limit" (a page-rounded
// MaxInt64); anything above it is no limit either.
const unlimitedV1 = 1 << 62

// Apply sets the runtime's soft memory limit to ratio times the memory
// limit of the cgroup this process is in, read from fsys (the root file
// system: os.DirFS("/")). ratio 0 disables it; GOMEMLIMIT in the
// environment (getenv) leaves the runtime's limit alone.
func Apply(fsys fs.FS, getenv func(string) string, ratio float64) (Result, error) {
	if ratio < 0 || ratio > 1 {
		return Result{Source: None}, fmt.Errorf("ratio %v: want 0 (off) to 1", ratio)
	}
	if getenv("GOMEMLIMIT") != "" {
		return Result{Source: FromEnv, Limit: debug.SetMemoryLimit(-1)}, nil
	}
	if ratio == 0 {
		return Result{Source: None}, nil
	}
	hard, err := CgroupLimit(fsys)
	if err != nil || hard == 0 {
		return Result{Source: None}, err
	}
	soft := int64(float64(hard) * ratio)
	debug.SetMemoryLimit(soft)
	return Result{Source: FromCgroup, Limit: soft, Cgroup: hard}, nil
}

// CgroupLimit returns the memory limit (bytes) of this process's cgroup, v2
// or v1, the smallest of its own and its ancestors' that fsys shows; 0 when
// there is none. Inside a container with its own cgroup namespace the
// process's cgroup is "/", whose limit file is the container's.
func CgroupLimit(fsys fs.FS) (int64, error) {
	data, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil // not Linux, or no /proc: no limit to follow
	}
	if err != nil {
		return 0, fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	v1, v2 := Cgroups(data)
	var limit int64
	for _, h := range []struct{ path, dir, file string }{
		{v2, "sys/fs/cgroup", "memory.max"},
		{v1, "sys/fs/cgroup/memory", "memory.limit_in_bytes"},
	} {
		if h.path == "" {
			continue
		}
		n, err := smallestUpward(fsys, h.dir, h.path, h.file)
		if err != nil {
			return 0, err
		}
		if n > 0 && (limit == 0 || n < limit) {
			limit = n
		}
	}
	return limit, nil
}

// Cgroups reads a /proc/<pid>/cgroup file: the path of the v1 memory
// cgroup and of the v2 cgroup, "" for a hierarchy the process is not in.
func Cgroups(data []byte) (v1Memory, v2 string) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// hierarchy-ID:controllers:path; v2 is "0::path".
		parts := strings.SplitN(sc.Text(), ":", 3)
		switch {
		case len(parts) != 3:
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case hasController(parts[1], "memory"):
			v1Memory = parts[2]
		}
	}
	return v1Memory, v2
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// smallestUpward reads file in the cgroup directory of cgPath under dir
// and in each of its parents up to dir itself; it returns the smallest
// limit found (0: none). Directories that are not there (a host path
// outside the container's view) are skipped.
func smallestUpward(fsys fs.FS, dir, cgPath, file string) (int64, error) {
	var limit int64
	p := path.Clean("/" + cgPath)
	for {
		n, err := readLimit(fsys, path.Join(dir, p, file))
		if err != nil {
			return 0, err
		}
		if n > 0 && (limit == 0 || n < limit) {
			limit = n
		}
		if p == "/" {
			return limit, nil
		}
		p = path.Dir(p)
	}
}

// readLimit parses a memory.max or memory.limit_in_bytes file: "max" and
// v1's huge value are no limit (0), as is a missing file.
func readLimit(fsys fs.FS, name string) (int64, error) {
	data, err := fs.ReadFile(fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read /%s: %w", name, err)
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/%s: %q is not a byte count: %w", name, s, err)
	}
	if n >= unlimitedV1 {
		return 0, nil
	}
	return int64(n), nil
}
