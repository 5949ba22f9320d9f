package processor

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// The loop shortcut is only correct if hashPartition picks the partition
// sarama's producer sends a looped record to.
func TestHashPartitionMatchesSarama(t *testing.T) {
	sp := sarama.NewHashPartitioner("loop")
	for _, n := range []int32{1, 2, 3, 7, 12, 64, 1000} {
		for i := 0; i < 2000; i++ {
			key := "evt-" + strconv.Itoa(i)
			want, err := sp.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(key)}, n)
			if err != nil {
				t.Fatal(err)
			}
			if got := hashPartition(key, n); got != want {
				t.Fatalf("hashPartition(%q, %d) = %d, sarama says %d", key, n, got, want)
			}
		}
	}
}

// recordingProducer keeps what the member sends, for the test to read.
type recordingProducer struct {
	sarama.AsyncProducer // not implemented: calling anything else panics
	in                   chan *sarama.ProducerMessage
}

func (p *recordingProducer) Input() chan<- *sarama.ProducerMessage { return p.in }
func (p *recordingProducer) TxnStatus() sarama.ProducerTxnStatusFlag {
	return sarama.ProducerTxnFlagInTransaction
}

// sent takes the records sent since the last call.
func (p *recordingProducer) sent() []*sarama.ProducerMessage {
	var out []*sarama.ProducerMessage
	for {
		select {
		case msg := <-p.in:
			out = append(out, msg)
		default:
			return out
		}
	}
}

// An event whose record key is not its dedup key is judged at once when the
// loop would bring it back to its own partition, and in the same store as
// a copy that did go through the loop: whichever copy comes first is
// processed, the other is a duplicate.
func TestReKeyedEventIsJudgedWhereTheLoopWouldBringIt(t *testing.T) {
	// Event i's ID hashes to home; other is any other partition.
	i := 0
	for hashPartition("evt-bench-"+strconv.Itoa(i), benchPartitions) == 0 {
		i++
	}
	id := "evt-bench-" + strconv.Itoa(i)
	home, other := hashPartition(id, benchPartitions), int32(0)
	input := func(p int32, key string) *sarama.ConsumerMessage {
		return &sarama.ConsumerMessage{Topic: "orders", Partition: p, Offset: 5, Key: []byte(key),
			Value: benchValue(i), Timestamp: time.Now()}
	}
	// looped is the loop record as the loop topic delivers it.
	looped := func(t *testing.T, rec *sarama.ProducerMessage) *sarama.ConsumerMessage {
		key, _ := rec.Key.Encode()
		value, _ := rec.Value.Encode()
		msg := &sarama.ConsumerMessage{Topic: rec.Topic, Partition: hashPartition(string(key), benchPartitions),
			Offset: 9, Key: key, Value: value, Timestamp: time.Now()}
		for _, h := range rec.Headers {
			msg.Headers = append(msg.Headers, &sarama.RecordHeader{Key: h.Key, Value: h.Value})
		}
		if msg.Partition != home {
			t.Fatalf("loop record of %s would go to partition %d, want %d", key, msg.Partition, home)
		}
		return msg
	}
	// topics names where each record went, changelog records with their partition.
	topics := func(recs []*sarama.ProducerMessage) []string {
		var out []string
		for _, r := range recs {
			name := r.Topic
			if _, ok := r.Metadata.(manualPartition); ok {
				name += "/" + strconv.Itoa(int(r.Partition))
			}
			out = append(out, name)
		}
		return out
	}
	processed := []string{"orders-deduped", "bench-table/" + strconv.Itoa(int(home))}
	sess := benchSession{ctx: context.Background()}

	t.Run("in place first", func(t *testing.T) {
		prod := &recordingProducer{in: make(chan *sarama.ProducerMessage, 64)}
		m := newTestMember(t, prod, home, other)
		m.process(sess, input(home, "order-a"))
		if got := topics(prod.sent()); !slices.Equal(got, processed) {
			t.Fatalf("event in its dedup key's partition sent %v, want %v (no loop record)", got, processed)
		}
		m.process(sess, input(other, "order-b"))
		recs := prod.sent()
		if got := topics(recs); !slices.Equal(got, []string{"bench-loop"}) {
			t.Fatalf("copy in partition %d sent %v, want one loop record", other, got)
		}
		m.process(sess, looped(t, recs[0]))
		if got := topics(prod.sent()); len(got) != 0 {
			t.Fatalf("looped copy of a processed event sent %v, want nothing (a duplicate)", got)
		}
	})
	t.Run("looped first", func(t *testing.T) {
		prod := &recordingProducer{in: make(chan *sarama.ProducerMessage, 64)}
		m := newTestMember(t, prod, home, other)
		m.process(sess, input(other, "order-b"))
		recs := prod.sent()
		if got := topics(recs); !slices.Equal(got, []string{"bench-loop"}) {
			t.Fatalf("event in partition %d sent %v, want one loop record", other, got)
		}
		m.process(sess, looped(t, recs[0]))
		if got := topics(prod.sent()); !slices.Equal(got, processed) {
			t.Fatalf("looped event sent %v, want %v", got, processed)
		}
		m.process(sess, input(home, "order-a"))
		if got := topics(prod.sent()); len(got) != 0 {
			t.Fatalf("copy in its dedup key's partition sent %v, want nothing (a duplicate)", got)
		}
	})
}
