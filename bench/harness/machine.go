package harness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dedupkit/dedup/bench/procstat"
)

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs     int
	CPUModel string
	MemTotal string
	Kernel   string
	Go       string
	Kafka    string
	LoadAvg  string
	// Busy lists the processes that used more than 5% of a core in a
	// two-second sample at the start: what else was running.
	Busy []string
}

func describeMachine(kafkaData string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), CPUModel: "unknown", MemTotal: "unknown", Kafka: "unknown"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				f := strings.Fields(line)
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					m.MemTotal = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	m.Kafka = kafkaVersion(brokerPID(kafkaData))
	m.Busy = busyProcesses(2 * time.Second)
	return m
}

// kafkaVersion finds kafka_<scala>-<version>.jar on the broker's classpath.
func kafkaVersion(pid int) string {
	if pid == 0 {
		return "unknown (broker not started by the harness)"
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "unknown"
	}
	args := strings.Split(string(b), "\x00")
	for i, a := range args {
		if a != "-cp" || i+1 >= len(args) {
			continue
		}
		for _, dir := range strings.Split(args[i+1], ":") {
			jars, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), "kafka_2.13-*.jar"))
			for _, j := range jars {
				v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(j), "kafka_2.13-"), ".jar")
				if !strings.ContainsAny(v, "-") {
					return "Apache Kafka " + v + " (KRaft, single node)"
				}
			}
		}
	}
	return "unknown"
}

// busyProcesses samples every process's CPU time twice.
func busyProcesses(d time.Duration) []string {
	read := func() map[int]float64 {
		out := map[int]float64{}
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if c, err := procstat.ReadCPU(pid); err == nil {
				out[pid] = c.User + c.System
			}
		}
		return out
	}
	before := read()
	time.Sleep(d)
	after := read()
	type busy struct {
		pid  int
		frac float64
	}
	var list []busy
	for pid, t := range after {
		if f := (t - before[pid]) / d.Seconds(); f > 0.05 {
			list = append(list, busy{pid, f})
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].frac > list[j].frac })
	var out []string
	for _, b := range list {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", b.pid))
		out = append(out, fmt.Sprintf("%s (pid %d): %.0f%% of a core", strings.TrimSpace(string(comm)), b.pid, 100*b.frac))
	}
	return out
}

// runHotPath runs the hot-path `go test -bench` benchmarks of the worker's
// module and returns their output; those that read a real broker
// (BenchmarkRestoreFromKafka) read the run's. The worker's module is found through Go
// rather than the working directory, so that the harness run from the
// repository root (`make bench`) and from the bench module (whose go.mod
// replaces it with ../) measure the same checkout.
func runHotPath(ctx context.Context, cfg Config) string {
	dir, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/dedupkit/dedup").Output()
	if err != nil || strings.TrimSpace(string(dir)) == "" {
		return "skipped: not run inside the worker's module or the bench module (go list -m github.com/dedupkit/dedup failed)"
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-count", "1",
		"./codecs", "./processor", ".")
	cmd.Dir = strings.TrimSpace(string(dir))
	cmd.Env = append(os.Environ(), "KAFKA_BROKERS="+strings.Join(cfg.Brokers, ","))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s\n(go test -bench failed: %v)", out, err)
	}
	var keep []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "Benchmark") || strings.HasPrefix(line, "pkg:") || strings.HasPrefix(line, "cpu:") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}
