package integration

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/faults"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/processor"
	"github.com/dedupkit/dedup/redrive"
)

// TestRedriveDeadLetters fails a handler for some events (no retries) and
// rejects others, fixes it, and re-drives the dead letters by reason, the
// first run killed before a commit: each event then reaches the output
// exactly once, a second run moves nothing,
// a dry run writes nothing, and the dead letters of the other reason wait
// for a re-drive of their own (by the binary). With the re-drive's state
// lost, the copies written again are skipped by the worker's table; of two
// such runs at once, only one writes.
func TestRedriveDeadLetters(t *testing.T) {
	e := newEnv(t, 3)
	group := e.group("redrive")
	dlq, state := group+"-dlq", group+"-redrive"
	dropTopics(t, e.brokers, state)
	var broken, rejecting atomic.Bool
	broken.Store(true)
	rejecting.Store(true)
	topo := e.topology(group, &counter{}) // HandlerRetries 0: dead-lettered at the first error
	topo.Handler = dedup.HandlerFunc(func(_ context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		switch {
		case strings.HasPrefix(ev.EventID, "fail-") && broken.Load():
			return nil, errors.New("downstream unavailable")
		case strings.HasPrefix(ev.EventID, "perm-") && rejecting.Load():
			return nil, dedup.Permanent(errors.New("rejected by a rule that is fixed later"))
		}
		return []dedup.Message{{Key: ev.Key, Value: ev.Value, Headers: ev.Headers}}, nil
	})
	e.startEOS(topo, processor.Config{StateDir: t.TempDir()})

	headers := []sarama.RecordHeader{{Key: []byte("trace"), Value: []byte("t")}, {Key: []byte("x"), Value: []byte("1")}, {Key: []byte("x"), Value: []byte("2")}}
	var in []kafkatest.Record
	for _, prefix := range []string{"ok", "fail"} {
		for i := range 10 {
			in = append(in, event(fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("agg-%d", i%4)))
		}
	}
	for i := range 3 {
		in = append(in, event(fmt.Sprintf("perm-%d", i), "agg-p"))
	}
	for i := range in {
		in[i].HeaderList = headers
	}
	written := e.produce(in...)
	e.waitProcessed(group)

	reasons := map[string]int{}
	inP1From1 := 0 // handler-error dead letters in partition 1 at offset 1 or later
	for _, r := range e.read(dlq) {
		reason := string(r.Headers[dedup.HeaderDLQReason])
		reasons[reason]++
		if reason == dedup.ReasonHandlerError && r.Partition == 1 && r.Offset >= 1 {
			inP1From1++
		}
	}
	if reasons[dedup.ReasonHandlerError] != 10 || reasons[dedup.ReasonHandlerPermanent] != 3 || len(reasons) != 2 {
		t.Fatalf("dead letters by reason %v, want 10 %s and 3 %s", reasons, dedup.ReasonHandlerError, dedup.ReasonHandlerPermanent)
	}
	e.outputOnce(t, "ok-")

	ctx := t.Context()
	base := redrive.Config{Brokers: e.brokers, Group: group, Reasons: []string{dedup.ReasonHandlerError}}
	run := func(name string, cfg redrive.Config, redriven, already int) *redrive.Report {
		t.Helper()
		rep, err := redrive.Run(ctx, cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rep.Redriven != redriven || rep.AlreadyRedriven != already || rep.NotRedrivableTotal() != 0 {
			t.Fatalf("%s: re-driven %d, already %d, not re-drivable %v; want %d, %d, none", name,
				rep.Redriven, rep.AlreadyRedriven, rep.NotRedrivable, redriven, already)
		}
		return rep
	}

	// A dry run reports and writes nothing: no record, no state topic.
	before := endOffsets(t, e.brokers, e.input)
	dry := base
	dry.DryRun = true
	rep := run("dry run", dry, 10, 0)
	if rep.Scanned != 13 || rep.Matched != 10 || rep.Skipped[redrive.FilterReason] != 3 || rep.ByReason[dedup.ReasonHandlerError] != 10 {
		t.Errorf("dry run: scanned %d, matched %d, skipped %v, by reason %v", rep.Scanned, rep.Matched, rep.Skipped, rep.ByReason)
	}
	if after := endOffsets(t, e.brokers, e.input); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a dry run wrote to the input: end offsets %v, before %v", after, before)
	}
	if topicExists(t, e.brokers, state) {
		t.Error("a dry run created the state topic")
	}
	// A target that does not exist is not written to, nor created.
	missing := dry
	missing.Target = unique("missing")
	rep, err := redrive.Run(ctx, missing)
	if err != nil || rep.NotRedrivable[redrive.WhyNoTopic] != 10 || rep.Redriven != 0 {
		t.Errorf("re-drive to a missing topic: err %v, not re-drivable %v, re-driven %d", err, rep.NotRedrivable, rep.Redriven)
	}
	if topicExists(t, e.brokers, missing.Target) {
		t.Errorf("the re-drive created the missing target %s", missing.Target)
	}
	// The other filters, in dry runs.
	limited := dry
	limited.Limit = 3
	if rep := run("dry run, limit 3", limited, 3, 0); !rep.LimitReached {
		t.Error("a run stopped by its limit does not say so")
	}
	ranged := dry
	ranged.Partitions, ranged.FromOffset = []int32{1}, 1
	run("dry run, partition 1 from offset 1", ranged, inP1From1, 0)
	early := dry
	early.To = time.Now().Add(-time.Hour)
	if rep := run("dry run, dead-lettered an hour ago", early, 0, 0); rep.Skipped[redrive.FilterTime] != 10 {
		t.Errorf("time filter skipped %v, want 10 by time", rep.Skipped)
	}

	// Fixed: the handler-error dead letters are re-driven. The first run
	// dies before its second transaction's commit, leaving it open; the
	// next one aborts it and moves the rest, so each is moved once.
	broken.Store(false)
	crash := base
	crash.BatchSize = 4
	commits := 0
	killAtSecond := func() error {
		if commits++; commits == 2 {
			return errors.New("killed")
		}
		return nil
	}
	rep, err = redrive.Run(faults.WithBeforeCommit(ctx, killAtSecond), crash)
	if err == nil || rep == nil || rep.Redriven != 4 {
		t.Fatalf("re-drive killed at its second commit: err %v, report %+v; want the error and 4 re-driven", err, rep)
	}
	run("re-drive after the crash", base, 6, 4)
	e.waitProcessed(group)
	e.outputOnce(t, "ok-", "fail-")
	copies := e.redrivenCopies(t, written, headers)
	if len(copies) != 10 {
		t.Errorf("%d re-driven copies in the input, want 10", len(copies))
	}

	// Run twice: nothing new in the input, nothing new at the output.
	before = endOffsets(t, e.brokers, e.input)
	run("second re-drive", base, 0, 10)
	if after := endOffsets(t, e.brokers, e.input); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a second re-drive wrote to the input: end offsets %v, before %v", after, before)
	}
	e.waitProcessed(group)
	e.outputOnce(t, "ok-", "fail-")

	// The other reason stayed: the binary re-drives it now.
	rejecting.Store(false)
	bin := buildProcessor(t)
	args := []string{"redrive", "--brokers", strings.Join(e.brokers, ","), "--group", group, "--reason", dedup.ReasonHandlerPermanent}
	out := runBinary(t, bin, append(args, "--dry-run")...)
	t.Logf("processor %s --dry-run:\n%s", strings.Join(args, " "), out)
	if !strings.HasPrefix(out, "dry run: nothing written") || !regexp.MustCompile(`(?m)^would re-drive: +3 \(handler-permanent 3\)$`).MatchString(out) {
		t.Errorf("binary dry run printed\n%s", out)
	}
	out = runBinary(t, bin, args...)
	t.Logf("processor %s:\n%s", strings.Join(args, " "), out)
	if !regexp.MustCompile(`(?m)^re-driven: +3 \(handler-permanent 3\)$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^skipped by filter: +10 \(reason 10\)$`).MatchString(out) {
		t.Errorf("binary re-drive printed\n%s", out)
	}
	e.waitProcessed(group)
	e.outputOnce(t, "ok-", "fail-", "perm-")
	all := base
	all.Reasons = nil
	run("re-drive of every reason", all, 0, 13)

	// A bad flag fails at start, naming it.
	cmd := exec.Command(bin, "redrive", "--brokers", strings.Join(e.brokers, ","), "--group", group, "--to-offset", "-5")
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "--to-offset:") {
		t.Errorf("--to-offset -5: err %v, printed %s", err, b)
	}

	// The state lost (another state topic): every dead letter is copied
	// again, and the worker skips each copy, its event being marked seen.
	// Two runs at once: the one that starts second fences the first, whose
	// transaction is aborted, so the dead letters are copied once, not twice.
	lost := all
	lost.StateTopic = unique("lost-state")
	dropTopics(t, e.brokers, lost.StateTopic)
	stuck := lost
	sent, release := make(chan struct{}), make(chan struct{})
	holdCommit := func() error { close(sent); <-release; return nil }
	stuckErr := make(chan error, 1)
	go func() { _, err := redrive.Run(faults.WithBeforeCommit(ctx, holdCommit), stuck); stuckErr <- err }() // waited for below
	<-sent
	run("re-drive without its state, another run stuck before its commit", lost, 13, 0)
	close(release)
	if err := <-stuckErr; !errors.Is(err, redrive.ErrFenced) {
		t.Errorf("the run that was overtaken ended with %v, want %v", err, redrive.ErrFenced)
	} else {
		t.Logf("the run that was overtaken: %v", err)
	}
	e.waitProcessed(group)
	e.outputOnce(t, "ok-", "fail-", "perm-")
	if n := len(e.redrivenCopies(t, written, headers)); n != 26 {
		t.Errorf("%d re-driven copies in the input, want 26", n)
	}

	// The dead letters deleted (as retention does): the next run removes
	// their state records, and the one after finds none left.
	deleteAll(t, e.brokers, dlq)
	if rep := run("re-drive after the dead letters were deleted", all, 0, 0); rep.Pruned != 13 || rep.Scanned != 0 {
		t.Errorf("pruned %d, scanned %d; want 13 and 0", rep.Pruned, rep.Scanned)
	}
	if rep := run("re-drive once more", all, 0, 0); rep.Pruned != 0 {
		t.Errorf("pruned %d again", rep.Pruned)
	}
}

// deleteAll deletes every record of topic, moving its log start to its end.
func deleteAll(t *testing.T, brokers []string, topic string) {
	t.Helper()
	end := endOffsets(t, brokers, topic)
	admin, err := sarama.NewClusterAdmin(brokers, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteRecords(topic, end); err != nil {
		t.Fatal(err)
	}
}

// outputOnce fails unless every input event whose ID has one of the
// prefixes is in the output exactly once, and no other is there.
func (e *env) outputOnce(t *testing.T, prefixes ...string) {
	t.Helper()
	ids := eventIDs(t, e.read(e.output))
	want := map[string]int{}
	for _, p := range prefixes {
		n := map[string]int{"ok-": 10, "fail-": 10, "perm-": 3}[p]
		for i := range n {
			want[fmt.Sprintf("%s%d", p, i)] = 1
		}
	}
	for id, n := range ids {
		if want[id] != n {
			t.Errorf("event %s in the output %d times, want %d", id, n, want[id])
		}
	}
	for id := range want {
		if ids[id] == 0 {
			t.Errorf("event %s missing from the output", id)
		}
	}
}

// redrivenCopies reads the input's re-driven copies and checks each
// against the record it copies: key, value, headers in order (the
// dead-letter ones gone, dlq-redriven-from added) and partition.
func (e *env) redrivenCopies(t *testing.T, written []kafkatest.Record, headers []sarama.RecordHeader) []kafkatest.Record {
	t.Helper()
	orig := map[string]kafkatest.Record{}
	for _, r := range written {
		orig[string(r.Value)] = r
	}
	var copies []kafkatest.Record
	for _, r := range e.read(e.input) {
		from, ok := r.Headers[redrive.HeaderRedrivenFrom]
		if !ok {
			continue
		}
		copies = append(copies, r)
		o, ok := orig[string(r.Value)]
		if !ok {
			t.Errorf("copy %s/%d@%d (from %s) has a value no input record had: %q", e.input, r.Partition, r.Offset, from, r.Value)
			continue
		}
		var got []string
		for _, h := range r.HeaderList {
			got = append(got, string(h.Key)+"="+string(h.Value))
		}
		var want []string
		for _, h := range headers {
			want = append(want, string(h.Key)+"="+string(h.Value))
		}
		want = append(want, redrive.HeaderRedrivenFrom+"="+string(from))
		if r.Key != o.Key || r.Partition != o.Partition || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("copy from %s: key %q partition %d headers %v; the original: key %q partition %d headers %v",
				from, r.Key, r.Partition, got, o.Key, o.Partition, want)
		}
	}
	return copies
}

func endOffsets(t *testing.T, brokers []string, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkatest.WaitSettled(ctx, brokers, topic); err != nil {
		t.Fatal(err)
	}
	end, err := kafkatest.EndOffsets(brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	return end
}

// topicExists asks without creating it (the test broker creates topics
// that a client's metadata request names).
func topicExists(t *testing.T, brokers []string, topic string) bool {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	meta, err := admin.DescribeTopics([]string{topic})
	if err != nil {
		t.Fatal(err)
	}
	return len(meta) == 1 && meta[0].Err == sarama.ErrNoError
}

// runBinary runs the processor binary and returns its stdout; a failure
// fails the test with its stderr.
func runBinary(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("processor %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}
