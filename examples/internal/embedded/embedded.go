// Package embedded is the examples' demo mode: an in-process
// Kafka-protocol broker (kfake) to write a sample stream to, wait on and
// read back, so `go run ./examples/<name>` shows a worker at work with no
// cluster. A service of your own does not need it: its producers write the
// input topic and its consumers read the outputs.
package embedded

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkatest"
)

// Record is a Kafka record: key, value, headers in order, and where it was
// written or read.
type Record = kafkatest.Record

// Broker is a running in-process broker.
type Broker struct {
	cluster *kfake.Cluster
	Addrs   []string // its listen addresses, for processor.Config.Brokers
}

// Start starts a one-node broker holding topic with partitions partitions.
// Close it when done.
func Start(topic string, partitions int32) (*Broker, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		return nil, fmt.Errorf("start embedded broker: %w", err)
	}
	return &Broker{cluster: c, Addrs: c.ListenAddrs()}, nil
}

// Close stops the broker; everything written to it is gone.
func (b *Broker) Close() { b.cluster.Close() }

// Produce writes recs to topic in order; a keyed record goes to its key's
// hash partition. It returns them with partition and offset filled in.
func (b *Broker) Produce(topic string, recs []Record) ([]Record, error) {
	return kafkatest.Produce(b.Addrs, topic, recs)
}

// WaitCommitted waits until group has committed, on each topic in turn, the
// offsets that were the topic's end when that topic's wait began. For a
// dedup group that is the input and then "<group>-loop": an event keyed by
// something other than its event ID is re-keyed through the loop, and its
// outputs are committed with the loop record's offset.
func (b *Broker) WaitCommitted(ctx context.Context, group string, topics ...string) error {
	for _, t := range topics {
		if err := kafkatest.WaitCommitted(ctx, b.Addrs, group, t); err != nil {
			return err
		}
	}
	return nil
}

// Read returns the committed records of topic (read_committed: what a
// transaction aborted by a crash wrote is not there).
func (b *Broker) Read(ctx context.Context, topic string) ([]Record, error) {
	return kafkatest.ReadAll(ctx, b.Addrs, topic)
}

// PrintInput writes recs under a title in the order given, each with its
// partition and offset: where the producer's copies of an event landed.
func PrintInput(w io.Writer, title string, recs []Record) {
	fmt.Fprintf(w, "%s: %d records\n", title, len(recs))
	for _, r := range recs {
		fmt.Fprintf(w, "  p%d@%-2d %s\n", r.Partition, r.Offset, line(r))
	}
}

// PrintOutput writes recs under a title sorted by key, headers and value,
// so that runs print the same text whatever order the partitions were
// processed in.
func PrintOutput(w io.Writer, title string, recs []Record) {
	lines := make([]string, 0, len(recs))
	for _, r := range recs {
		lines = append(lines, line(r))
	}
	slices.Sort(lines)
	fmt.Fprintf(w, "%s: %d records\n", title, len(recs))
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// line is one record: key, headers in order and value. A dead letter (a
// record with a dlq-reason header) shows the reason and the error instead
// of all its headers.
func line(r Record) string {
	var hs []string
	for _, h := range r.HeaderList {
		hs = append(hs, string(h.Key)+"="+string(h.Value))
	}
	if reason, ok := r.Headers[dedup.HeaderDLQReason]; ok {
		hs = []string{fmt.Sprintf("reason=%s error=%q", reason, r.Headers[dedup.HeaderDLQError])}
	}
	l := fmt.Sprintf("key=%-9s", cmp.Or(r.Key, `""`))
	if len(hs) > 0 {
		l += " [" + strings.Join(hs, " ") + "]"
	}
	return l + " " + string(r.Value)
}
