package integration

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/retention"
	"github.com/dedupkit/dedup/processor"
)

// severalInputs is a test's second input topic beside the env's, with the
// events written to them: the same IDs on both (a topic and its retry
// topic), and IDs on only one of them.
type severalInputs struct {
	second string
	events []kafkatest.Record // every distinct event
}

// produceToBoth creates the second input with partitions and writes to the
// two inputs: 20 events to both, 10 to the first only, 10 to the second only.
func (e *env) produceToBoth(partitions int32) severalInputs {
	e.t.Helper()
	in := severalInputs{second: unique("in-retry")}
	dropTopics(e.t, e.brokers, in.second)
	if err := kafkatest.CreateTopic(e.brokers, in.second, partitions); err != nil {
		e.t.Fatal(err)
	}
	shared, first, second := events("both", 20), events("first", 10), events("second", 10)
	e.produce(append(slices.Clone(shared), first...)...)
	if _, err := kafkatest.Produce(e.brokers, in.second, append(slices.Clone(shared), second...)); err != nil {
		e.t.Fatal(err)
	}
	in.events = slices.Concat(shared, first, second)
	return in
}

// waitInputsProcessed waits until group has committed everything on every
// input, then on its loop topic, whose records the inputs' events made.
func (e *env) waitInputsProcessed(group string, inputs ...string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, topic := range append(slices.Clone(inputs), group+"-loop") {
		if err := kafkatest.WaitCommitted(ctx, e.brokers, group, topic); err != nil {
			e.t.Fatal(err)
		}
	}
}

// committedToEnd fails unless group's committed offset on every partition
// of topic is the partition's end.
func (e *env) committedToEnd(group, topic string) {
	e.t.Helper()
	ends, err := kafkatest.EndOffsets(e.brokers, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	parts := make([]int32, 0, len(ends))
	for p := range ends {
		parts = append(parts, p)
	}
	committed, err := kafkatest.Committed(e.brokers, group, topic, parts)
	if err != nil {
		e.t.Fatal(err)
	}
	for p, end := range ends {
		if committed[p] != end {
			e.t.Errorf("group %s: committed offset on %s/%d is %d, want its end %d", group, topic, p, committed[p], end)
		}
	}
}

// One group reading two inputs has one table: an event ID that arrives on
// both is written once, the events of each input are all written, and the
// group's committed offsets cover both inputs, on either runtime.
func TestSeveralInputsShareOneTable(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) {
			e := newEnv(t, 3)
			group := e.group("inputs")
			in := e.produceToBoth(3)
			obs := &counter{}
			topo := e.topology(group, obs)
			topo.Inputs = append(topo.Inputs, in.second)
			w := rt.start(e, topo, t.TempDir())
			e.waitInputsProcessed(group, e.input, in.second)
			w.stop(t)

			e.exactlyOnce(in.events)
			if processed, skipped := obs.counts(); skipped < 20 {
				t.Errorf("%d events processed, %d skipped; want the 20 events of both inputs skipped once each", processed, skipped)
			}
			if dl := e.read(group + "-dlq"); len(dl) != 0 {
				t.Errorf("%d dead letters, want none", len(dl))
			}
			e.committedToEnd(group, e.input)
			e.committedToEnd(group, in.second)
		})
	}
}

// Inputs of different partition counts cannot share the group's table and
// loop topics: either runtime refuses to start, at once, naming each input
// with its count and the command that fixes it.
func TestSeveralInputsOfDifferentPartitionCountsFailTheStart(t *testing.T) {
	e := newEnv(t, 3)
	group := e.group("inputs-count")
	second := unique("in-retry")
	dropTopics(t, e.brokers, second)
	if err := kafkatest.CreateTopic(e.brokers, second, 2); err != nil {
		t.Fatal(err)
	}
	want := []string{"the inputs of group " + group + " have different partition counts (" +
		e.input + " has 3, " + second + " has 2)",
		"`kafka-topics.sh --bootstrap-server " + strings.Join(e.brokers, ",") + " --alter --topic " + second + " --partitions 3`"}
	for _, runtime := range []string{"exactly-once", "best-effort"} {
		topo := e.topology(group, &counter{})
		topo.Inputs = append(topo.Inputs, second)
		startFailsWithMismatch(t, e, runtime, topo, want)
	}
}

// The retention check reads every input: the one that keeps its records
// longer than the dedup retention is named, whichever place it has.
func TestRetentionCheckedOnEveryInput(t *testing.T) {
	e := newEnv(t, 1) // broker default retention.ms: 7 days
	short := unique("in-short")
	dropTopics(t, e.brokers, short)
	if err := kafkatest.CreateTopicWith(e.brokers, short, 1, map[string]string{"retention.ms": "3600000"}); err != nil {
		t.Fatal(err)
	}
	for _, inputs := range [][]string{{short, e.input}, {e.input, short}} {
		topo := &dedup.Topology{Inputs: inputs, Retention: 2 * time.Hour}
		err := retention.Check(t.Context(), e.brokers, processor.Security{}, slog.Default(), nil, topo, true)
		want := `--retention 2h0m0s is shorter than retention.ms of input topic "` + e.input + `" (168h0m0s)`
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), short) {
			t.Fatalf("inputs %v: %v; want a refusal saying %q and not naming %s", inputs, err, want, short)
		}
	}
}

// The binary reads the inputs --input lists, and reset-offsets moves the
// group on every input it names: a replay of both is skipped by the table,
// and one that leaves an input out says so.
func TestReplaySeveralInputs(t *testing.T) {
	e := newEnv(t, 3)
	bin := buildProcessor(t)
	group := e.group("inputs-replay")
	in := e.produceToBoth(3)
	args := []string{"--brokers", strings.Join(e.brokers, ","), "--group", group, "--input", e.input + "," + in.second,
		"--output", e.output, "--state-dir", t.TempDir(), "--session-timeout", "3s"}
	p := startProc(t, bin, args...)
	e.waitInputsProcessed(group, e.input, in.second)
	if skipped := p.metric("dedup_duplicates_skipped_total"); skipped != 20 {
		t.Errorf("the first run skipped %v events, want the 20 that came on both inputs", skipped)
	}
	p.term()
	e.exactlyOnce(in.events)

	e.waitInactive(group)
	reset := []string{"reset-offsets", "--brokers", strings.Join(e.brokers, ","), "--group", group, "--to", "earliest"}
	out, code := runBin(t, bin, append(reset, "--input", e.input, "--dry-run")...)
	if note := "note: group " + group + " also has committed offsets on " + in.second + ", not in --input"; code != 0 || !strings.Contains(out, note) {
		t.Fatalf("dry run on one input: exit %d, want 0 and %q\n%s", code, note, out)
	}
	t.Logf("dry run on one input:\n%s", out)
	out, code = runBin(t, bin, append(reset, "--input", e.input+","+in.second)...)
	if code != 0 || !strings.Contains(out, "NEW (APPLIED)") || strings.Contains(out, "note:") {
		t.Fatalf("reset-offsets on both inputs: exit %d, want 0, a table APPLIED and no note\n%s", code, out)
	}
	t.Logf("reset-offsets on both inputs:\n%s", out)
	for _, topic := range []string{e.input, in.second} {
		committed, err := kafkatest.Committed(e.brokers, group, topic, []int32{0, 1, 2})
		if err != nil {
			t.Fatal(err)
		}
		if committed[0] != 0 || committed[1] != 0 || committed[2] != 0 {
			t.Fatalf("after reset-offsets --to earliest the group's offsets on %s are %v, want 0 each", topic, committed)
		}
		if !strings.Contains(out, topic) {
			t.Errorf("reset-offsets does not list %s:\n%s", topic, out)
		}
	}

	p = startProc(t, bin, args...)
	e.waitInputsProcessed(group, e.input, in.second)
	if skipped := p.metric("dedup_duplicates_skipped_total"); skipped != 60 {
		t.Errorf("the replay skipped %v events, want every record of both inputs, 60", skipped)
	}
	p.term()
	e.exactlyOnce(in.events)
}
