package memlimit

import (
	"runtime/debug"
	"strings"
	"testing"
	"testing/fstest"
)

func files(kv ...string) fstest.MapFS {
	m := fstest.MapFS{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = &fstest.MapFile{Data: []byte(kv[i+1])}
	}
	return m
}

func TestCgroupLimit(t *testing.T) {
	tests := []struct {
		name    string
		fs      fstest.MapFS
		want    int64
		wantErr string
	}{
		{"no /proc", files(), 0, ""},
		{"v2 in a container (own namespace)", files(
			"proc/self/cgroup", "0::/\n",
			"sys/fs/cgroup/memory.max", "209715200\n"), 200 << 20, ""},
		{"v2 unlimited", files(
			"proc/self/cgroup", "0::/\n",
			"sys/fs/cgroup/memory.max", "max\n"), 0, ""},
		{"v2 nested: the parent's limit is smaller", files(
			"proc/self/cgroup", "0::/kubepods/pod1/c1\n",
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max", "max\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max", "268435456\n",
			"sys/fs/cgroup/memory.max", "max\n"), 256 << 20, ""},
		{"v2 host path not visible: the root's file", files(
			"proc/self/cgroup", "0::/system.slice/worker.service\n",
			"sys/fs/cgroup/memory.max", "104857600\n"), 100 << 20, ""},
		{"v1 (this machine's layout), unlimited", files(
			"proc/self/cgroup", "4:memory:/process_api/0a30\n3:cpuset:/\n0::/\n",
			"sys/fs/cgroup/memory/process_api/0a30/memory.limit_in_bytes", "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"), 0, ""},
		{"v1 limited", files(
			"proc/self/cgroup", "11:cpuacct,memory:/docker/abc\n",
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "536870912\n"), 512 << 20, ""},
		{"hybrid: v1 and v2 both limited, the smaller wins", files(
			"proc/self/cgroup", "4:memory:/a\n0::/b\n",
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes", "536870912\n",
			"sys/fs/cgroup/b/memory.max", "268435456\n"), 256 << 20, ""},
		{"garbage in the limit file", files(
			"proc/self/cgroup", "0::/\n",
			"sys/fs/cgroup/memory.max", "lots\n"), 0, `"lots" is not a byte count`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CgroupLimit(tt.fs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("CgroupLimit = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestApply(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	limited := files("proc/self/cgroup", "0::/\n", "sys/fs/cgroup/memory.max", "209715200\n")
	noEnv := func(string) string { return "" }

	res, err := Apply(limited, noEnv, 0.8)
	if err != nil || res.Source != FromCgroup || res.Cgroup != 200<<20 || res.Limit != 160<<20 {
		t.Fatalf("Apply = %+v, %v; want 160 MiB from a 200 MiB cgroup", res, err)
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
	if res, err := Apply(limited, env, 0.8); err != nil || res.Source != FromEnv || res.Limit != before {
		t.Fatalf("with GOMEMLIMIT: Apply = %+v, %v; want the runtime's limit left alone", res, err)
	}
	if res, err := Apply(limited, noEnv, 0); err != nil || res.Source != None || debug.SetMemoryLimit(-1) != before {
		t.Fatalf("ratio 0: Apply = %+v, %v; want nothing set", res, err)
	}
	if _, err := Apply(limited, noEnv, 1.5); err == nil {
		t.Fatal("ratio 1.5 accepted")
	}
}

func TestCgroups(t *testing.T) {
	tests := []struct {
		name, data string
		v1, v2     string
	}{
		{"v2 only", "0::/user.slice/session-1.scope\n", "", "/user.slice/session-1.scope"},
		{"hybrid (this machine)", "4:memory:/process_api/0a30\n3:cpuset:/\n0::/\n", "/process_api/0a30", "/"},
		{"v1 with joined controllers", "11:cpuacct,memory:/docker/abc\n2:cpu:/docker/abc\n", "/docker/abc", ""},
		{"garbage lines", "nonsense\n\n", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v1, v2 := Cgroups([]byte(tt.data))
			if v1 != tt.v1 || v2 != tt.v2 {
				t.Fatalf("Cgroups = %q, %q; want %q, %q", v1, v2, tt.v1, tt.v2)
			}
		})
	}
}
