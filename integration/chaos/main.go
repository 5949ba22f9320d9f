// Command chaos is the fault suite at scale (docs/reliability.md): it runs the worker
// binary as separate processes against a real Kafka cluster, produces a load
// of events with duplicates and malformed records, and meanwhile SIGKILLs
// and restarts workers, scales them between 1 and 3 instances, kills
// brokers, freezes one instance into a zombie, cuts one off the brokers
// (a network partition, through internal/netfault) and wipes one's state dir.
// Then it verifies the output read_committed: for exactly-once it must hold
// every good event exactly once and every malformed record in the
// dead-letter topic. The same scenario under best-effort (goka's runtime,
// which can lose or duplicate events) is reported for comparison. `make chaos` runs the full scenario; `--preset
// short` (and TestChaosShort, in `make test`) a small version.
//
// See docs/reliability.md for the scenario and the latest figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/dedupkit/dedup/internal/netfault"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := run(ctx, &cfg, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stdout, "chaos: %v\n", err)
		os.Exit(1)
	}
	if failed(results) {
		os.Exit(1)
	}
}

// run executes every scenario of cfg (already validated) and prints the
// figures to out. The error is for a run that could not be carried out; a
// run that found lost or doubled events returns results that fail.
func run(ctx context.Context, cfg *Config, out io.Writer) ([]*result, error) {
	began := time.Now()
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	runDir, err := makeRunDir(root, cfg.RunDir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "chaos: run dir %s, seed %d\n", runDir, cfg.Seed)
	bin := cfg.ProcessorBin
	if bin == "" {
		bin = filepath.Join(runDir, "processor")
		build := exec.Command("go", "build", "-o", bin, "github.com/dedupkit/dedup/cmd/processor")
		build.Dir = root
		if b, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/processor: %v\n%s", err, b)
		}
	}

	var cl *cluster
	if len(cfg.Brokers) > 0 {
		cl = externalCluster(cfg.Brokers)
		fmt.Fprintf(out, "chaos: using the cluster at %s\n", strings.Join(cfg.Brokers, ","))
	} else {
		clusterLog, err := os.Create(filepath.Join(runDir, "cluster.log"))
		if err != nil {
			return nil, err
		}
		defer clusterLog.Close()
		fmt.Fprintf(out, "chaos: starting a %d-node Kafka cluster on port %d (log %s)\n", cfg.Nodes, cfg.KafkaPort, clusterLog.Name())
		if cl, err = startCluster(cfg, root, clusterLog); err != nil {
			return nil, err
		}
	}

	// The fault proxy of --net-partitions: w1 reaches the brokers through it.
	var px *netfault.Proxy
	if cfg.NetPartitions > 0 {
		routes := cl.proxyRoutes
		if !cl.own() {
			routes = cfg.ProxyRoutes
		}
		if px, err = netfault.Start(routes); err != nil {
			return nil, err
		}
		defer px.Close()
	}

	var results []*result
	var runErr error
	for _, mode := range cfg.Guarantees {
		r, err := runScenario(ctx, cfg, cl, px, bin, runDir, mode, cfg.Seed, out)
		if r != nil {
			r.print(out, cfg)
			results = append(results, r)
		}
		if err != nil {
			runErr = fmt.Errorf("%s scenario: %w", mode, err)
			break
		}
	}
	summary(out, cfg, results, time.Since(began))
	if f, err := os.Create(filepath.Join(runDir, "summary.txt")); err == nil {
		fmt.Fprintf(f, "command: %s\nseed %d\n", strings.Join(os.Args, " "), cfg.Seed)
		for _, r := range results {
			r.print(f, cfg)
		}
		summary(f, cfg, results, time.Since(began))
		f.Close()
	}

	ok := runErr == nil && !failed(results)
	if cl.own() {
		clean := ok && !cfg.KeepCluster
		if cfg.KeepCluster {
			fmt.Fprintf(out, "chaos: cluster left running: %s\n", strings.Join(cl.brokers, ","))
		} else if err := cl.stop(clean); err != nil {
			fmt.Fprintf(out, "chaos: stopping the cluster: %v\n", err)
		} else if !clean {
			fmt.Fprintf(out, "chaos: cluster stopped, its data kept in %s for inspection (KAFKA_DATA=... integration/kafka/kafka.sh up)\n", cfg.KafkaData)
		}
	}
	if ok {
		for _, r := range results { // the LevelDB tables are big and no longer needed; the logs stay
			os.RemoveAll(filepath.Join(r.dir, "state"))
		}
	}
	fmt.Fprintf(out, "chaos: logs in %s\n", runDir)
	return results, runErr
}

// failed is true when an exactly-once scenario did not pass.
func failed(results []*result) bool {
	for _, r := range results {
		if r.mode == exactlyOnce && len(r.failures()) > 0 {
			return true
		}
	}
	return false
}

// summary prints one line per scenario and the verdict.
func summary(w io.Writer, cfg *Config, results []*result, took time.Duration) {
	src := fmt.Sprintf("%d-node cluster started by the driver", cfg.Nodes)
	if len(cfg.Brokers) > 0 {
		src = "cluster " + strings.Join(cfg.Brokers, ",")
	}
	fmt.Fprintf(w, "\n=== summary (%s, %d partitions, seed %d, %v)\n", src, cfg.Partitions, cfg.Seed, took.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tdistinct events\toutputs\tmissing\tduplicated\tmalformed in\tdead-lettered\tkills\tscale steps\tbroker kills\tzombie fenced\tnet cuts (aborted)\twipes\tcrashes\tfailed starts\tverdict")
	for _, r := range results {
		if r.report == nil {
			fmt.Fprintf(tw, "%s\t(not verified)\n", r.mode)
			continue
		}
		verdict := "PASS"
		if f := r.failures(); len(f) > 0 {
			verdict = "FAIL: " + strings.Join(f, "; ")
			if r.mode != exactlyOnce {
				verdict = "(reported, not asserted)"
			}
		}
		fenced, cuts := "-", fmt.Sprint(r.faults.netPartitions)
		if r.mode == exactlyOnce {
			fenced = fmt.Sprint(r.faults.fenced)
			cuts += fmt.Sprintf(" (%d)", r.faults.netAborted)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%s\n", r.mode, r.report.InputEvents, r.report.OutputRecords,
			r.report.MissingEvents, r.report.DuplicatedEvents, sum(r.badInput), sum(r.badDLQ), r.faults.kills, r.faults.scaleSteps,
			r.faults.brokerKills, fenced, cuts, r.faults.wipes, len(r.crashes)-r.startFailures(), r.startFailures(), verdict)
	}
	tw.Flush()
}

// moduleRoot is the directory of go.mod, where kafka.sh and the default run
// dir are found whatever the working directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the dedup module; run from its checkout")
	}
	return filepath.Dir(mod), nil
}

// makeRunDir creates <parent>/run-<time>; a relative parent is under the
// module root and ignores itself in git, as kafka.sh's data dir does.
func makeRunDir(root, parent string) (string, error) {
	if !filepath.IsAbs(parent) {
		parent = filepath.Join(root, parent)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	ignore := filepath.Join(parent, ".gitignore")
	if _, err := os.Stat(ignore); errors.Is(err, os.ErrNotExist) {
		os.WriteFile(ignore, []byte("*\n"), 0o644)
	}
	return os.MkdirTemp(parent, "run-"+time.Now().Format("20060102-150405")+"-")
}
