package integration

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/atleastonce"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/processor"
)

// A table or loop topic that exists already but does not fit the group (a
// partition count other than the input's, a table that is not compacted)
// stops either runtime at start with the topic, what was found, what is
// wanted and the fix; and at once, since no retry changes a topic: "at
// once" is asserted as no retry logged, not by a clock.
func TestExistingTopicsThatDoNotFitFailTheStart(t *testing.T) {
	compact := map[string]string{"cleanup.policy": "compact"}
	for _, tc := range []struct {
		name      string
		suffix    string // of the topic made before the worker starts
		parts     int32  // the input has 3
		config    map[string]string
		want      func(group, brokers, input string) []string // in the error
		wantNoFix string                                      // not in the error
	}{
		{"table with fewer partitions than the input", "-table", 2, compact, func(g, b, in string) []string {
			return []string{fmt.Sprintf("topic %s-table has 2 partitions, want 3 (the input %s has 3)", g, in),
				fmt.Sprintf("`processor reset-state --brokers %s --group %s --state-dir <each instance's --state-dir> --yes`", b, g)}
		}, "--alter --topic"},
		{"table with more partitions than the input", "-table", 4, compact, func(g, b, in string) []string {
			return []string{fmt.Sprintf("topic %s-table has 4 partitions, want 3", g),
				fmt.Sprintf("`processor reset-state --brokers %s --group %s", b, g),
				fmt.Sprintf("`kafka-topics.sh --bootstrap-server %s --alter --topic %s --partitions 4`", b, in)}
		}, ""},
		{"table with cleanup.policy=delete", "-table", 3, map[string]string{"cleanup.policy": "delete"}, func(g, b, _ string) []string {
			return []string{fmt.Sprintf("topic %s-table has cleanup.policy=delete, want compact", g),
				fmt.Sprintf("`kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s-table --add-config cleanup.policy=compact`", b, g)}
		}, ""},
		{"table with cleanup.policy=compact,delete", "-table", 3, map[string]string{"cleanup.policy": "compact,delete"}, func(g, _, _ string) []string {
			return []string{fmt.Sprintf("topic %s-table has cleanup.policy=compact,delete, want compact", g)}
		}, ""},
		{"loop with another partition count", "-loop", 5, nil, func(g, b, in string) []string {
			return []string{fmt.Sprintf("topic %s-loop has 5 partitions, want 3 (the input %s has 3)", g, in),
				fmt.Sprintf("`kafka-topics.sh --bootstrap-server %s --delete --topic %s-loop`", b, g)}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 3)
			group := e.group("topics")
			if err := kafkatest.CreateTopicWith(e.brokers, group+tc.suffix, tc.parts, tc.config); err != nil {
				t.Fatal(err)
			}
			want := tc.want(group, strings.Join(e.brokers, ","), e.input)
			for _, runtime := range []string{"exactly-once", "at-least-once"} {
				err := startFailsWithMismatch(t, e, runtime, e.topology(group, &counter{}), want)
				if tc.wantNoFix != "" && strings.Contains(err.Error(), tc.wantNoFix) {
					t.Errorf("%s: the error offers %q, which does not apply:\n%v", runtime, tc.wantNoFix, err)
				}
				// The start created the dead-letter and output topics and,
				// unless the test made it, the table. A topic created a moment
				// ago can be missing from the broker's metadata still: the next
				// start would then retry its check of the table (rightly) and
				// fail the no-retry assertion. Start it once they show.
				waitTopicsShown(t, e.brokers, group+"-table", group+"-dlq", e.output)
			}
		})
	}
}

// waitTopicsShown waits until the broker's metadata shows each of topics,
// which exist.
func waitTopicsShown(t *testing.T, brokers []string, topics ...string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		meta, err := admin.DescribeTopics(topics)
		shown := err == nil && len(meta) == len(topics)
		for _, m := range meta {
			shown = shown && m.Err == sarama.ErrNoError && len(m.Partitions) > 0
		}
		if shown {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("topics %v not all in the metadata 30 s after they were created (last: %v)", topics, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the broker's metadata
	}
}

// startFailsWithMismatch starts topo under runtime ("exactly-once" or
// another: goka's) and requires the start to fail at once, without a retry,
// with kafkautil.ErrTopicMismatch saying each of want. It returns the error.
func startFailsWithMismatch(t *testing.T, e *env, runtime string, topo *dedup.Topology, want []string) error {
	t.Helper()
	logs := &syncBuffer{}
	topo.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var err error
	if runtime == "exactly-once" {
		_, err = processor.New(t.Context(), processor.Config{Brokers: e.brokers, StateDir: t.TempDir(),
			Logger: topo.Logger}, topo)
	} else {
		_, err = atleastonce.New(t.Context(), atleastonce.Config{Brokers: e.brokers, StateDir: t.TempDir(),
			CommitInterval: 100 * time.Millisecond, Replication: -1, Logger: topo.Logger}, topo)
	}
	if !errors.Is(err, kafkautil.ErrTopicMismatch) {
		t.Fatalf("%s: started with %v, want kafkautil.ErrTopicMismatch", runtime, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: the error does not say %q:\n%v", runtime, w, err)
		}
	}
	if strings.Contains(logs.String(), "retrying") {
		t.Fatalf("%s: the mismatch was retried:\n%s", runtime, logs)
	}
	t.Logf("%s: %v", runtime, err)
	return err
}

// Topics made beforehand as the worker would make them (an operator's
// kafka-topics.sh, or a worker's earlier run) pass the checks: each
// runtime starts on them and processes every event once.
func TestExistingTopicsThatFitAreUsed(t *testing.T) {
	for _, runtime := range []string{"exactly-once", "at-least-once"} {
		t.Run(runtime, func(t *testing.T) {
			e := newEnv(t, 3)
			group := e.group("topics-ok")
			for _, tp := range []struct {
				suffix string
				config map[string]string
			}{{"-table", map[string]string{"cleanup.policy": "compact"}}, {"-loop", nil}, {"-dlq", nil}} {
				if err := kafkatest.CreateTopicWith(e.brokers, group+tp.suffix, 3, tp.config); err != nil {
					t.Fatal(err)
				}
			}
			if err := kafkatest.CreateTopic(e.brokers, e.output, 1); err != nil { // any count will do
				t.Fatal(err)
			}
			topo := e.topology(group, &counter{})
			var w *worker
			if runtime == "exactly-once" {
				w = e.startEOS(topo, processor.Config{StateDir: t.TempDir()})
			} else {
				w = e.start(topo, t.TempDir())
			}
			in := events("t", 30)
			e.produce(in...)
			e.waitProcessed(group)
			w.stop(t)
			e.exactlyOnce(in)
		})
	}
}
