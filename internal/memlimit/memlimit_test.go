package memlimit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	aml "github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/dedupkit/dedup/internal/kafkatest"
)

func reads(n uint64, err error) func() (uint64, error) {
	return func() (uint64, error) { return n, err }
}

func TestApply(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	limited := reads(200<<20, nil)
	noEnv := func(string) string { return "" }

	res, err := apply(limited, noEnv, 0.8)
	if err != nil || res.Source != FromCgroup || res.Cgroup != 200<<20 || res.Limit != 160<<20 {
		t.Fatalf("apply = %+v, %v; want 160 MiB from a 200 MiB cgroup", res, err)
	}
	if got := debug.SetMemoryLimit(-1); got != 160<<20 {
		t.Fatalf("runtime soft limit %d, want %d", got, 160<<20)
	}

	debug.SetMemoryLimit(before)
	env := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "100MiB"
		}
		return ""
	}
	if res, err := apply(limited, env, 0.8); err != nil || res.Source != FromEnv || res.Limit != before {
		t.Fatalf("with GOMEMLIMIT: apply = %+v, %v; want the runtime's limit left alone", res, err)
	}
	if res, err := apply(limited, noEnv, 0); err != nil || res.Source != None || debug.SetMemoryLimit(-1) != before {
		t.Fatalf("ratio 0: apply = %+v, %v; want nothing set", res, err)
	}
	if _, err := apply(limited, noEnv, 1.5); err == nil {
		t.Fatal("ratio 1.5 accepted")
	}
}

// No limit to follow is not an error; a limit that cannot be read is, and
// the runtime's limit stays as it was.
func TestApplyWithoutALimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	noEnv := func(string) string { return "" }
	for name, read := range map[string]func() (uint64, error){
		"unlimited":           reads(0, aml.ErrNoLimit),
		"not in a cgroup":     reads(0, aml.ErrNoCgroup),
		"not Linux":           reads(0, aml.ErrCgroupsNotSupported),
		"no /proc":            reads(0, fmt.Errorf("failed to open /proc/self/mountinfo: %w", os.ErrNotExist)),
		"v1's huge non-limit": reads(9223372036854771712, nil),
	} {
		if res, err := apply(read, noEnv, 0.9); err != nil || res.Source != None || debug.SetMemoryLimit(-1) != before {
			t.Errorf("%s: apply = %+v, %v; want no limit and no error", name, res, err)
		}
	}
	garbage := errors.New(`failed to parse memory.max value: strconv.ParseUint: parsing "lots": invalid syntax`)
	res, err := apply(reads(0, garbage), noEnv, 0.9)
	if !errors.Is(err, garbage) || res.Source != None || debug.SetMemoryLimit(-1) != before {
		t.Fatalf("unreadable limit: apply = %+v, %v; want the reader's error and nothing set", res, err)
	}
}

// In a memory cgroup of its own with a hard limit, a process finds that
// limit: the reading is automemlimit's, this checks it against a limit the
// kernel enforces on this machine. Needs write access to cgroupfs (root).
func TestCgroupLimitInACgroup(t *testing.T) {
	if os.Getenv("MEMLIMIT_TEST_CHILD") == "1" {
		n, err := CgroupLimit()
		fmt.Printf("cgroup limit %d, %v\n", n, err)
		return
	}
	const limit = 200 << 20
	dir, err := childCgroup(fmt.Sprintf("dedup-memlimit-test-%d", os.Getpid()), limit)
	if err != nil {
		kafkatest.Missing(t, "cannot create a memory cgroup here: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(dir, "cgroup.procs"),
		os.Args[0], "-test.run=^TestCgroupLimitInACgroup$")
	cmd.Env = append(os.Environ(), "MEMLIMIT_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("cgroup limit %d, <nil>", limit); !strings.Contains(string(out), want) {
		t.Fatalf("child said:\n%s\nwant %q", out, want)
	}
}

// childCgroup makes a memory cgroup with a hard limit under this process's
// own: cgroup v2 when its memory controller is there, else v1's memory
// hierarchy.
func childCgroup(name string, limit int64) (string, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	type try struct{ dir, limitFile string }
	var tries []try
	for _, line := range strings.Split(string(own), "\n") {
		f := strings.SplitN(line, ":", 3)
		switch {
		case len(f) != 3:
		case f[0] == "0" && f[1] == "":
			if c, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && slices.Contains(strings.Fields(string(c)), "memory") {
				tries = append(tries, try{filepath.Join("/sys/fs/cgroup", f[2], name), "memory.max"})
			}
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			tries = append(tries, try{filepath.Join("/sys/fs/cgroup/memory", f[2], name), "memory.limit_in_bytes"})
		}
	}
	if len(tries) == 0 {
		return "", errors.New("no cgroup v2 memory controller or v1 memory hierarchy")
	}
	var errs []error
	for _, tr := range tries {
		if err := os.Mkdir(tr.dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.WriteFile(filepath.Join(tr.dir, tr.limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			os.Remove(tr.dir)
			errs = append(errs, err)
			continue
		}
		return tr.dir, nil
	}
	return "", errors.Join(errs...)
}
