package main

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/netfault"
	"github.com/dedupkit/dedup/internal/wire"
)

// TestChaosShort is the short fault suite of `make test`: the short preset
// (20k events, 8 SIGKILLs, 2 scale steps, a zombie, a state-dir wipe, 350
// malformed records) on the broker in KAFKA_BROKERS, exactly-once only.
func TestChaosShort(t *testing.T) {
	v := os.Getenv("KAFKA_BROKERS")
	if v == "" {
		kafkatest.Missing(t, "KAFKA_BROKERS is not set; `make test` starts a broker and sets it")
	}
	cfg := shortConfig()
	cfg.Brokers = splitList(v)
	if routes := os.Getenv("KAFKA_PROXY_ROUTES"); routes != "" {
		var err error
		if cfg.ProxyRoutes, err = netfault.ParseRoutes(routes); err != nil {
			t.Fatalf("KAFKA_PROXY_ROUTES: %v", err)
		}
	} else {
		t.Log("KAFKA_PROXY_ROUTES is not set: no network partition (`make test` sets it from kafka.sh proxy-routes)")
		cfg.NetPartitions = 0
	}
	cfg.RunDir = os.TempDir() + "/dedup-chaos"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	results, err := run(ctx, &cfg, logWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if f := r.failures(); len(f) > 0 {
			t.Errorf("%s: not exactly once: %s\n(the run dir named above keeps every worker's log)", r.mode, strings.Join(f, "; "))
			continue
		}
		// Only after a pass: a failed run's topics and logs are evidence.
		deleteTopics(t, cfg.Brokers, r)
		os.RemoveAll(filepath.Dir(r.dir))
	}
}

// logWriter passes the driver's lines to t.Log as they come.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func deleteTopics(t *testing.T, brokers []string, r *result) {
	admin, err := sarama.NewClusterAdmin(brokers, kafkatest.Config())
	if err != nil {
		t.Logf("delete topics: %v", err)
		return
	}
	defer admin.Close()
	for _, topic := range []string{r.input, r.output, r.dlq, r.group + "-table", r.group + "-loop"} {
		if err := admin.DeleteTopic(topic); err != nil {
			t.Logf("delete topic %s: %v", topic, err)
		}
	}
}

func TestWorkloadIsExactAndDeterministic(t *testing.T) {
	cfg := shortConfig()
	cfg.Events, cfg.Bad = 10_000, 700
	gen := func() ([]record, *workload) {
		w := newWorkload(&cfg, 42)
		w.now = func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }
		var all []record
		for !w.done() {
			all = append(all, w.take(123)...)
		}
		return all, w
	}
	a, w := gen()
	b, _ := gen()
	if len(a) != len(b) {
		t.Fatalf("two runs with one seed: %d and %d records", len(a), len(b))
	}
	events, copies, bad := map[int]int{}, 0, map[string]int{}
	for i, r := range a {
		if string(r.value) != string(b[i].value) || string(r.key) != string(b[i].key) {
			t.Fatalf("record %d differs between two runs with one seed", i)
		}
		if r.event < 0 {
			kind, _, _ := strings.Cut(r.bad, "/")
			bad[kind]++
			_, err := wire.Decoder{ID: wire.DefaultIDSource()}.Decode(r.value, nil)
			if wire.Reason(err) != badKinds[kind].reason {
				t.Errorf("%s %q: decodes to reason %q, want %q", r.bad, r.value, wire.Reason(err), badKinds[kind].reason)
			}
			continue
		}
		events[r.event]++
		copies++
		ev, err := wire.Decoder{ID: wire.DefaultIDSource()}.Decode(r.value, nil)
		if err != nil {
			t.Fatalf("event %d: %v", r.event, err)
		}
		if n, ok := eventNumber(ev.EventID); !ok || n != r.event || jsonID(r.value) != ev.EventID {
			t.Fatalf("event %d has ID %q", r.event, ev.EventID)
		}
	}
	if len(events) != cfg.Events || copies-len(events) != w.dups || sum(bad) != cfg.Bad || len(bad) != len(cfg.BadKinds) {
		t.Fatalf("%d distinct events (want %d), %d duplicates (want %d), malformed %v (want %d of %d kinds)",
			len(events), cfg.Events, copies-len(events), w.dups, bad, cfg.Bad, len(cfg.BadKinds))
	}
	if share := float64(w.dups) / float64(cfg.Events); share < 0.17 || share > 0.23 {
		t.Fatalf("duplicate share %.3f, want about %.2f", share, cfg.DupRate)
	}
}

func TestPlanFaults(t *testing.T) {
	cfg := fullConfig()
	window := cfg.window()
	plan := planFaults(&cfg, window, rand.New(rand.NewPCG(7, 2)))
	counts := map[faultKind]int{}
	down := -1
	var killedAt time.Duration
	count := cfg.Instances
	for i, f := range plan {
		counts[f.kind]++
		if i > 0 && f.at < plan[i-1].at {
			t.Fatalf("plan not in time order at %d", i)
		}
		if f.at < 0 || f.at > window {
			t.Fatalf("fault %d at %v, outside the load window %v", i, f.at, window)
		}
		switch f.kind {
		case faultBrokerKill:
			if down != -1 {
				t.Fatalf("node %d killed while node %d is down", f.node, down)
			}
			down, killedAt = f.node, f.at
		case faultBrokerStart:
			if down != f.node {
				t.Fatalf("node %d started while node %d is down", f.node, down)
			}
			// run keeps this downtime when the kill comes late.
			if f.down != f.at-killedAt || f.down < cfg.BrokerDown/2 {
				t.Fatalf("node %d: start %v after the kill, planned downtime %v (at least %v)", f.node, f.at-killedAt, f.down, cfg.BrokerDown/2)
			}
			down = -1
		case faultScale:
			if f.target == count || f.target < 1 || f.target > cfg.Instances {
				t.Fatalf("scale step from %d to %d", count, f.target)
			}
			count = f.target
		}
	}
	if counts[faultKill] != cfg.Kills || counts[faultScale] != cfg.ScaleSteps || counts[faultBrokerKill] != cfg.BrokerKills ||
		counts[faultBrokerStart] != cfg.BrokerKills || counts[faultZombie] != cfg.Zombies || counts[faultWipe] != cfg.Wipes ||
		counts[faultNetPartition] != cfg.NetPartitions {
		t.Fatalf("plan counts %v", counts)
	}
}

func TestFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--preset", "short", "--events", "1234"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Events != 1234 || cfg.Kills != shortConfig().Kills {
		t.Fatalf("short preset with --events: %+v", cfg)
	}
	if g := fullConfig().Guarantees; strings.Join(g, ",") != "exactly-once,best-effort" {
		t.Fatalf("full preset runs %v, want exactly-once then best-effort", g)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--dup-rate", "1.5"}, "--dup-rate: 1.5 is not in 0..1"},
		{[]string{"--standby-replicas", "4"}, "--standby-replicas: 4: want 0 to 3"},
		{[]string{"--brokers", "localhost:9092"}, "--broker-kills: 2 broker kills need the driver's own 3-node cluster"},
		{[]string{"--bad-kinds", "not-json,bogus"}, `--bad-kinds: "bogus" is not one of`},
		{[]string{"--kafka-port", "9092"}, "--kafka-port: 9092 is the default broker"},
		{[]string{"--rate", "100000", "--events", "1000"}, "faults do not fit"},
		{[]string{"--guarantees", "maybe-once"}, `--guarantees: "maybe-once"`},
		{[]string{"--guarantees", "exactly-once,at-least-once"}, `--guarantees: "at-least-once" is not exactly-once or best-effort`},
		{[]string{"--preset", "short", "--brokers", "localhost:9092"}, "--net-partitions: 1 partitions on --brokers need --proxy-routes"},
		{[]string{"--proxy-routes", "localhost:9392"}, `route "localhost:9392": want listen=target`},
	} {
		cfg, err := parseFlags(tt.args)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.args, err, tt.want)
		}
	}
}
