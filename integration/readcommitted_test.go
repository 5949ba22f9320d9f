package integration

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

// TestReadCommittedReadsBatchesLargerThanOneFetch: restores and standbys
// read the changelog in fetches of 1 MiB, and a table topic may hold
// batches larger than that (a raised max.message.bytes). Each such batch
// must still come whole, in order, with the small records around it.
func TestReadCommittedReadsBatchesLargerThanOneFetch(t *testing.T) {
	brokers := brokers(t)
	topic := unique("readcommitted-large")
	createTopicWithConfig(t, brokers, topic, 1, map[string]string{"max.message.bytes": fmt.Sprint(8 << 20)})

	cfg := kafkatest.Config()
	cfg.Producer.Return.Successes = true
	cfg.Producer.MaxMessageBytes = 8 << 20
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	// Small records, two records of 3 MiB, and small records again.
	var want [][]byte
	for i := 0; i < 20; i++ {
		v := []byte(fmt.Sprintf("small-%d", i))
		if i == 8 || i == 9 {
			v = bytes.Repeat([]byte{byte('a' + i)}, 3<<20)
		}
		want = append(want, v)
		if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(v)}); err != nil {
			t.Fatalf("produce record %d: %v", i, err)
		}
	}

	_, end, err := kafkautil.Bounds(client, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got [][]byte
	next, err := kafkautil.ReadCommitted(ctx, client, topic, 0, 0, end, func(_ int64, rec *sarama.Record) error {
		got = append(got, rec.Value)
		return nil
	})
	if err != nil {
		t.Fatalf("ReadCommitted: %v", err)
	}
	if next != end {
		t.Fatalf("ReadCommitted stopped at %d, want %d", next, end)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d: %d bytes read, want %d", i, len(got[i]), len(want[i]))
		}
	}
}
