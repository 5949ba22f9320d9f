package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/engine"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/processor"
)

// createTopicWithConfig creates topic with config entries, deleted when the
// test ends.
func createTopicWithConfig(t *testing.T, brokers []string, topic string, partitions int32, config map[string]string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	entries := map[string]*string{}
	for k, v := range config {
		entries[k] = &v
	}
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1, ConfigEntries: entries}, false); err != nil {
		t.Fatal(err)
	}
	dropTopics(t, brokers, topic)
}

// TestRecordTooLargeIsDeadLetteredNotWedged: an output topic takes records
// of at most 4000 bytes and the dead-letter topic 2500. One event's output
// is larger than the output topic takes, one undecodable record is larger
// than the dead-letter topic takes, and two records sit one byte either
// side of the limit. The worker must dead-letter the two that cannot be
// written (the second cut to fit, with its size and SHA-256), write the
// rest once, and keep committing: before, the first record stopped every
// transaction for good.
func TestRecordTooLargeIsDeadLetteredNotWedged(t *testing.T) {
	e := newEnv(t, 2)
	group := e.group("toolarge")
	dropTopics(t, e.brokers, e.output)
	createTopicWithConfig(t, e.brokers, e.output, 2, map[string]string{"max.message.bytes": "4000"})
	createTopicWithConfig(t, e.brokers, group+"-dlq", 2, map[string]string{"max.message.bytes": "2500"})
	topo := e.topology(group, &counter{})
	topo.Handler = dedup.HandlerFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		if ev.EventID == "big" {
			return []dedup.Message{{Key: ev.Key, Value: bytes.Repeat([]byte("x"), 6000)}}, nil
		}
		return dedup.Forward().Handle(ctx, ev)
	})
	e.startEOS(topo, processor.Config{StateDir: t.TempDir()})

	// The record limit is the smallest max.message.bytes less the batch
	// overhead (128): 2500 - 128 = 2372 bytes.
	const limit = 2500 - 128
	sized := func(id string, size int) kafkatest.Record {
		prefix := fmt.Sprintf(`{"eventId":%q,"pad":"`, id)
		pad := size - engine.RecordSize(id, nil, nil) - len(prefix) - 2
		return kafkatest.Record{Key: id, Value: []byte(prefix + string(bytes.Repeat([]byte("p"), pad)) + `"}`)}
	}
	atLimit, overLimit := sized("at-limit", limit), sized("over-limit", limit+1)
	garbage := bytes.Repeat([]byte("#"), 3000) // not JSON, and too large for the dead-letter topic
	// Keyed by event ID (event's aggregate is the ID here): no loop record.
	in := []kafkatest.Record{event("a", "a"), {Key: "big", Value: []byte(`{"eventId":"big"}`)}, atLimit, overLimit,
		{Key: "garbage", Value: garbage}, event("b", "b")}
	e.produce(in...)
	e.waitProcessed(group)

	ids := eventIDs(t, e.read(e.output))
	for _, id := range []string{"a", "b", "at-limit"} {
		if ids[id] != 1 {
			t.Errorf("%s in the output %d times, want 1", id, ids[id])
		}
	}
	if len(ids) != 3 {
		t.Errorf("output holds %v, want a, b and at-limit once", ids)
	}
	dead := map[string]kafkatest.Record{}
	for _, r := range e.read(group + "-dlq") {
		dead[r.Key] = r
	}
	for _, key := range []string{"big", "over-limit"} {
		if r, ok := dead[key]; !ok || string(r.Headers[dedup.HeaderDLQReason]) != dedup.ReasonTooLarge {
			t.Errorf("%s: dead letter %v (found %v), want reason %s", key, r.Headers[dedup.HeaderDLQReason], ok, dedup.ReasonTooLarge)
		}
	}
	g, ok := dead["garbage"]
	sum := sha256.Sum256(garbage)
	switch {
	case !ok:
		t.Fatal("the undecodable record is not in the dead-letter topic")
	case string(g.Headers[dedup.HeaderDLQReason]) != "not-json":
		t.Errorf("garbage: reason %s, want not-json", g.Headers[dedup.HeaderDLQReason])
	case len(g.Value) >= len(garbage) || !bytes.HasPrefix(garbage, g.Value):
		t.Errorf("garbage: dead letter holds %d bytes, want a prefix of the %d", len(g.Value), len(garbage))
	case string(g.Headers[dedup.HeaderDLQOriginalSize]) != strconv.Itoa(len(garbage)) ||
		string(g.Headers[dedup.HeaderDLQOriginalSHA256]) != hex.EncodeToString(sum[:]):
		t.Errorf("garbage: size %s sha %s, want %d and the value's SHA-256", g.Headers[dedup.HeaderDLQOriginalSize],
			g.Headers[dedup.HeaderDLQOriginalSHA256], len(garbage))
	}
}

// TestRecordLimitLoweredWhileRunning: the output topic's max.message.bytes
// is lowered to 2000 after the worker read the limits. The broker then
// refuses the transaction that holds a 3000-byte output; the worker must
// read the limits again, dead-letter that event (cut to the new limit) when
// it comes again, and go on with the next one. Before, every transaction
// that held the record aborted, for good.
func TestRecordLimitLoweredWhileRunning(t *testing.T) {
	e := newEnv(t, 1)
	group := e.group("lowered")
	dropTopics(t, e.brokers, e.output)
	createTopicWithConfig(t, e.brokers, e.output, 1, map[string]string{"max.message.bytes": "100000"})
	topo := e.topology(group, &counter{})
	e.startEOS(topo, processor.Config{StateDir: t.TempDir()})

	e.produce(event("a", "a"))
	e.waitProcessed(group)
	lowerMaxMessageBytes(t, e.brokers, e.output, 2000)
	big := kafkatest.Record{Key: "big", Value: fmt.Appendf(nil, `{"eventId":"big","pad":%q}`, bytes.Repeat([]byte("p"), 3000))}
	e.produce(big, event("b", "b"))
	e.waitProcessed(group)

	ids := eventIDs(t, e.read(e.output))
	if len(ids) != 2 || ids["a"] != 1 || ids["b"] != 1 {
		t.Errorf("output holds %v, want a and b once", ids)
	}
	dead := e.read(topo.DLQ)
	if len(dead) != 1 {
		t.Fatalf("dead-letter topic holds %d records, want the big event's", len(dead))
	}
	d := dead[0]
	sum := sha256.Sum256(big.Value)
	switch {
	case d.Key != "big" || string(d.Headers[dedup.HeaderDLQReason]) != dedup.ReasonTooLarge:
		t.Errorf("dead letter key %q reason %q, want big and %s", d.Key, d.Headers[dedup.HeaderDLQReason], dedup.ReasonTooLarge)
	case engine.RecordSize(d.Key, d.Value, nil) > 2000 || !bytes.HasPrefix(big.Value, d.Value):
		t.Errorf("dead letter holds %d bytes: want a prefix of the event cut to the new limit", len(d.Value))
	case string(d.Headers[dedup.HeaderDLQOriginalSHA256]) != hex.EncodeToString(sum[:]):
		t.Errorf("dead letter SHA-256 header %q, want the event's", d.Headers[dedup.HeaderDLQOriginalSHA256])
	}
}
