package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// memCgroup is a memory cgroup with a hard limit for one contender process:
// the hold runs its worker in one, so "at most 200 MB" is a limit the kernel
// enforces (an OOM kill fails the hold), not only a number read afterwards.
// It is a child of the harness's own cgroup: cgroup v2 when the memory
// controller is there, else v1's memory hierarchy. Creating one needs write
// access to cgroupfs (root, as `make bench` runs here); without it the hold
// runs unlimited and the report says why.
type memCgroup struct {
	dir   string
	v2    bool
	limit int64
}

// newMemCgroup creates the cgroup name with a hard limit of limit bytes.
func newMemCgroup(name string, limit int64) (*memCgroup, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("memory cgroup: %w", err)
	}
	v1, v2 := cgroups(own)
	var errs []error
	if v2 != "" && v2HasMemory() {
		g := &memCgroup{dir: filepath.Join("/sys/fs/cgroup", v2, name), v2: true, limit: limit}
		if err := g.create("memory.max"); err == nil {
			return g, nil
		} else {
			errs = append(errs, fmt.Errorf("v2: %w", err))
		}
	}
	if v1 != "" {
		g := &memCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", v1, name), limit: limit}
		if err := g.create("memory.limit_in_bytes"); err == nil {
			return g, nil
		} else {
			errs = append(errs, fmt.Errorf("v1: %w", err))
		}
	}
	if len(errs) == 0 {
		return nil, errors.New("memory cgroup: no cgroup v1 memory hierarchy or v2 mount for this process")
	}
	return nil, fmt.Errorf("memory cgroup: %w", errors.Join(errs...))
}

// cgroups reads a /proc/<pid>/cgroup file: the path of the v1 memory
// cgroup and of the v2 cgroup, "" for a hierarchy the process is not in.
func cgroups(data []byte) (v1Memory, v2 string) {
	for _, line := range strings.Split(string(data), "\n") {
		// hierarchy-ID:controllers:path; v2 is "0::path".
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) != 3:
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			v1Memory = parts[2]
		}
	}
	return v1Memory, v2
}

// v2HasMemory reports whether /sys/fs/cgroup is a cgroup v2 mount with the
// memory controller. On a hybrid host it is a tmpfs holding the v1
// hierarchies, where a mkdir would make a plain directory that limits
// nothing.
func v2HasMemory() bool {
	data, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	return err == nil && slices.Contains(strings.Fields(string(data)), "memory")
}

func (g *memCgroup) create(limitFile string) error {
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(g.dir, limitFile), []byte(strconv.FormatInt(g.limit, 10)), 0o644); err != nil {
		os.Remove(g.dir)
		return err
	}
	return nil
}

// wrap returns the command that runs exe in the cgroup: a shell moves
// itself into it and then execs exe, so the process is limited from its
// first allocation (os/exec can start a process in a cgroup only on v2).
func (g *memCgroup) wrap(exe string, args []string) (string, []string) {
	script := `echo $$ > "$0" && exec "$@"`
	return "/bin/sh", append([]string{"-c", script, filepath.Join(g.dir, "cgroup.procs"), exe}, args...)
}

// oomKills is how many processes the kernel killed in the cgroup for
// lack of memory.
func (g *memCgroup) oomKills() (int, error) {
	file := "memory.oom_control"
	if g.v2 {
		file = "memory.events"
	}
	data, err := os.ReadFile(filepath.Join(g.dir, file))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, nil // kernels before 4.13 do not count them
}

// remove deletes the cgroup; its process must have exited.
func (g *memCgroup) remove() error { return os.Remove(g.dir) }

// close ends a run in the cgroup, after its process exited: an error that
// names the OOM kills if there were any (the run failed for lack of
// memory), and the cgroup removed (a failure to remove is only logged).
func (g *memCgroup) close(logf func(string, ...any)) (kills int, err error) {
	kills, readErr := g.oomKills()
	if readErr != nil {
		logf("reading the OOM kills of cgroup %s: %v", g.dir, readErr)
	}
	if kills > 0 {
		err = fmt.Errorf("the kernel killed the worker %d times for exceeding its %s memory limit", kills, mib(g.limit))
	}
	if rmErr := g.remove(); rmErr != nil {
		logf("removing cgroup %s: %v", g.dir, rmErr)
	}
	return kills, err
}
