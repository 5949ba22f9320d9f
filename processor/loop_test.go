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
// member owns the table partition its dedup key hashes to, in the same store
// a copy that went through the loop is judged in: whichever copy comes first
// is processed, the other is a duplicate. A member that does not own that
// partition loops the event there.
func TestReKeyedEventIsJudgedInItsDedupKeysPartition(t *testing.T) {
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
	// topics names where each record went, with the partition of those the
	// runtime partitions itself (changelog and loop records).
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

	// loopCopy is the loop record of the event's copy in partition other, as
	// a member owning other but not home sends it and the loop topic
	// delivers it.
	loopCopy := func(t *testing.T) *sarama.ConsumerMessage {
		prod := &recordingProducer{in: make(chan *sarama.ProducerMessage, 64)}
		m := newTestMember(t, prod, other)
		processNow(m, sess, prepared(m, input(other, "order-b")))
		recs := prod.sent()
		if got, want := topics(recs), []string{"bench-loop/" + strconv.Itoa(int(home))}; !slices.Equal(got, want) {
			t.Fatalf("member without partition %d sent %v for the event, want %v", home, got, want)
		}
		rec := recs[0]
		key, _ := rec.Key.Encode()
		value, _ := rec.Value.Encode()
		msg := &sarama.ConsumerMessage{Topic: rec.Topic, Partition: rec.Partition, Offset: 9, Key: key, Value: value,
			Timestamp: time.Now()}
		for _, h := range rec.Headers {
			msg.Headers = append(msg.Headers, &sarama.RecordHeader{Key: h.Key, Value: h.Value})
		}
		return msg
	}

	t.Run("input copy first", func(t *testing.T) {
		looped := loopCopy(t)
		prod := &recordingProducer{in: make(chan *sarama.ProducerMessage, 64)}
		m := newTestMember(t, prod, home, other)
		processNow(m, sess, prepared(m, input(other, "order-b")))
		if got := topics(prod.sent()); !slices.Equal(got, processed) {
			t.Fatalf("event in partition %d sent %v, want %v (judged in partition %d, no loop record)", other, got, processed, home)
		}
		processNow(m, sess, prepared(m, input(home, "order-a")))
		if got := topics(prod.sent()); len(got) != 0 {
			t.Fatalf("copy in partition %d sent %v, want nothing (a duplicate)", home, got)
		}
		processNow(m, sess, prepared(m, looped))
		if got := topics(prod.sent()); len(got) != 0 {
			t.Fatalf("looped copy of a processed event sent %v, want nothing (a duplicate)", got)
		}
	})
	t.Run("looped copy first", func(t *testing.T) {
		looped := loopCopy(t)
		prod := &recordingProducer{in: make(chan *sarama.ProducerMessage, 64)}
		m := newTestMember(t, prod, home, other)
		processNow(m, sess, prepared(m, looped))
		if got := topics(prod.sent()); !slices.Equal(got, processed) {
			t.Fatalf("looped event sent %v, want %v", got, processed)
		}
		for _, p := range []int32{other, home} {
			processNow(m, sess, prepared(m, input(p, "order-"+strconv.Itoa(int(p)))))
			if got := topics(prod.sent()); len(got) != 0 {
				t.Fatalf("copy in partition %d sent %v, want nothing (a duplicate)", p, got)
			}
		}
	})
}
