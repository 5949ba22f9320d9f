package harness

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/dedupkit/dedup/internal/kafkatest"
)

// A process started through wrap runs in the cgroup from its first
// allocation, and going over the limit gets it killed and counted. Needs
// write access to cgroupfs (root); skipped otherwise.
func TestMemCgroupLimitsAndCountsOOMKills(t *testing.T) {
	g, err := newMemCgroup("dedup-bench-test-"+strings.ReplaceAll(t.Name(), "/", "-"), 48<<20)
	if err != nil {
		kafkatest.Missing(t, "cannot create a memory cgroup here: %v", err)
	}
	t.Cleanup(func() {
		if err := g.remove(); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	exe, args := g.wrap("/bin/cat", []string{"/proc/self/cgroup"})
	out, err := exec.Command(exe, args...).Output()
	if err != nil {
		t.Fatalf("cat in the cgroup: %v", err)
	}
	if !strings.Contains(string(out), "/dedup-bench-test-") {
		t.Fatalf("the wrapped process is not in the cgroup:\n%s", out)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		kafkatest.Missing(t, "python3 not found: cannot allocate past the limit")
	}
	exe, args = g.wrap(python, []string{"-c", "x = bytearray(128 << 20); x[::4096] = b'x' * len(x[::4096])"})
	if err := exec.Command(exe, args...).Run(); err == nil {
		t.Fatal("a process allocating 128 MiB survived a 48 MiB limit")
	}
	if n, err := g.oomKills(); err != nil || n < 1 {
		t.Fatalf("oomKills = %d, %v; want at least 1", n, err)
	}
}

func TestCgroups(t *testing.T) {
	tests := []struct {
		name, data string
		v1, v2     string
	}{
		{"v2 only", "0::/user.slice/session-1.scope\n", "", "/user.slice/session-1.scope"},
		{"hybrid", "4:memory:/process_api/0a30\n3:cpuset:/\n0::/\n", "/process_api/0a30", "/"},
		{"v1 with joined controllers", "11:cpuacct,memory:/docker/abc\n2:cpu:/docker/abc\n", "/docker/abc", ""},
		{"garbage lines", "nonsense\n\n", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v1, v2 := cgroups([]byte(tt.data))
			if v1 != tt.v1 || v2 != tt.v2 {
				t.Fatalf("cgroups = %q, %q; want %q, %q", v1, v2, tt.v1, tt.v2)
			}
		})
	}
}
