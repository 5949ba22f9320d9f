package contenders

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// KStreamsVersion is the Kafka Streams version of bench/kstreams/pom.xml,
// the version of the test broker, for the report.
const KStreamsVersion = "3.9.2"

// KStreamsJVMFlags are the JVM's flags for the Kafka Streams contender. The
// seen IDs live off-heap in RocksDB, so the heap holds only records in flight
// and the clients' buffers; 1 GiB leaves the garbage collector room (no
// starved heap) without pre-touching it (-Xms unset: RSS is what the JVM
// used). The collector is the JVM's default (G1).
var KStreamsJVMFlags = []string{"-Xmx1g"}

const kstreamsJar = "target/dedup-kstreams.jar"

// parallelMain is the Parallel Consumer contender's main class in that jar.
const parallelMain = "dedupkit.bench.kstreams.ParallelSleep"

// KStreamsDir finds bench/kstreams (the Maven project): $BENCH_KSTREAMS_DIR,
// or bench/kstreams in the working directory, the executable's directory or
// one of their parents, so both bin/bench run from the repository root and
// the smoke test run from bench/ find it.
func KStreamsDir() (string, error) {
	if d := os.Getenv("BENCH_KSTREAMS_DIR"); d != "" {
		return filepath.Abs(d)
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, d := range starts {
		for {
			cand := filepath.Join(d, "bench", "kstreams")
			if _, err := os.Stat(filepath.Join(cand, "pom.xml")); err == nil {
				return cand, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", fmt.Errorf("kstreams: no bench/kstreams/pom.xml above %v (set BENCH_KSTREAMS_DIR)", starts)
}

// CheckKStreams reports what the Kafka Streams contender lacks here: the
// Maven project, java, or mvn when the jar needs building. It returns the
// project's directory, the jar's path and whether the jar is stale.
func CheckKStreams() (dir, jar string, stale bool, err error) {
	if dir, err = KStreamsDir(); err != nil {
		return "", "", false, err
	}
	if _, err := exec.LookPath("java"); err != nil {
		return "", "", false, errors.New("kstreams: java is not installed (the Kafka Streams contender needs a JDK 17)")
	}
	jar = filepath.Join(dir, kstreamsJar)
	if stale, err = jarStale(dir, jar); err != nil {
		return "", "", false, err
	}
	if _, err := exec.LookPath("mvn"); stale && err != nil {
		return "", "", false, fmt.Errorf("kstreams: %s is missing or out of date and mvn (Maven) is not installed to build it", jar)
	}
	return dir, jar, stale, nil
}

// BuildKStreams builds the Kafka Streams contender's jar with `mvn -q -B
// package` when it is missing or older than the pom or a source file, and
// returns its path. It fails early when java or mvn is not installed.
func BuildKStreams(ctx context.Context, log io.Writer) (string, error) {
	dir, jar, stale, err := CheckKStreams()
	if err != nil || !stale {
		return jar, err
	}
	fmt.Fprintf(log, "kstreams: building %s (mvn -q -B package)\n", jar)
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "package")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kstreams: mvn package in %s: %w", dir, err)
	}
	return jar, nil
}

// jarStale reports a jar that is missing or older than the pom or any file
// under src/.
func jarStale(dir, jar string) (bool, error) {
	st, err := os.Stat(jar)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	built := st.ModTime()
	newer := func(p string) bool {
		s, err := os.Stat(p)
		return err == nil && s.ModTime().After(built)
	}
	stale := newer(filepath.Join(dir, "pom.xml"))
	err = filepath.WalkDir(filepath.Join(dir, "src"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		stale = stale || (!d.IsDir() && newer(p))
		return nil
	})
	return stale, err
}

// kstreamsArgs are java's arguments for cfg: the JVM flags, the jar, and the
// application's options mapped from the contender's.
func kstreamsArgs(cfg Config, jar string) []string {
	mode := "repartition"
	if cfg.Rekey == "never" {
		mode = "local"
	}
	// The Parallel Consumer contender is another main class of the same
	// jar; its manifest's Class-Path brings the dependencies either way.
	launch := []string{"-jar", jar}
	if cfg.Kind == Parallel {
		launch = []string{"-cp", jar, parallelMain}
	}
	args := append(append(append([]string{"java"}, KStreamsJVMFlags...), launch...),
		"--brokers", strings.Join(cfg.Brokers, ","), "--input", cfg.Input, "--output", cfg.Output,
		"--application-id", cfg.Group, "--state-dir", cfg.StateDir, "--mode", mode,
		"--commit-interval-ms", strconv.FormatInt(cfg.CommitInterval.Milliseconds(), 10),
		"--threads", strconv.Itoa(max(1, cfg.Threads)))
	if cfg.Sleep > 0 {
		args = append(args, "--sleep-ms", strconv.FormatInt(cfg.Sleep.Milliseconds(), 10))
	}
	if cfg.Concurrency > 0 {
		args = append(args, "--concurrency", strconv.Itoa(cfg.Concurrency))
	}
	if cfg.SessionTimeout > 0 {
		args = append(args, "--session-timeout-ms", strconv.FormatInt(cfg.SessionTimeout.Milliseconds(), 10))
	}
	if cfg.StandbyReplicas > 0 {
		args = append(args, "--standby-replicas", strconv.Itoa(cfg.StandbyReplicas))
	}
	if cfg.InstanceID != "" {
		args = append(args, "--group-instance-id", cfg.InstanceID)
	}
	return args
}

// execKStreams replaces this process with the JVM running the Kafka Streams
// application (or the Parallel Consumer contender, kind parallel), so the harness's child pid is the JVM's and the CPU time and
// peak RSS it reads are the JVM's. It returns only on an error.
func execKStreams(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("contender: %w", err)
	}
	dir, err := KStreamsDir()
	if err != nil {
		return err
	}
	jar := filepath.Join(dir, kstreamsJar)
	if _, err := os.Stat(jar); err != nil {
		return fmt.Errorf("kstreams: %w (the harness builds it: mvn -q -B package in %s)", err, dir)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return errors.New("kstreams: java is not installed (the Kafka Streams contender needs a JDK 17)")
	}
	return syscall.Exec(java, kstreamsArgs(cfg, jar), os.Environ())
}
