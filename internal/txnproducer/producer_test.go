package txnproducer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

func unique(name string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return name + "-" + hex.EncodeToString(b)
}

func config(id string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	c.ClientID = "txnproducer-test"
	c.Producer.Idempotent = true
	c.Producer.Transaction.ID = id
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewHashPartitioner
	c.Producer.Flush.Messages = 100
	c.Producer.Flush.Frequency = 5 * time.Millisecond
	c.Net.MaxOpenRequests = 1
	return c
}

// txnResult is what one transaction's records got back.
type txnResult struct {
	offsets map[string]int64 // key -> offset, from Successes
	errs    []error
}

// sendTxn sends n records keyed prefix-0.. in one transaction and reads
// their results; end commits or aborts it.
func sendTxn(t *testing.T, p *Producer, topic, prefix string, n int, end func() error) (txnResult, error) {
	t.Helper()
	if err := p.BeginTxn(); err != nil {
		return txnResult{}, err
	}
	r, err := sendRecords(p, topic, prefix, n)
	if err != nil {
		return r, err
	}
	return r, end()
}

// sendRecords sends n records keyed prefix-0.. in the open transaction and
// reads their results.
func sendRecords(p *Producer, topic, prefix string, n int) (txnResult, error) {
	r := txnResult{offsets: map[string]int64{}}
	sent, got := 0, 0
	for sent < n || got < sent {
		var in chan<- *sarama.ProducerMessage
		var msg *sarama.ProducerMessage
		if sent < n {
			in = p.Input()
			msg = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("%s-%d", prefix, sent)),
				Value: sarama.StringEncoder("v")}
		}
		select {
		case in <- msg:
			sent++
		case m := <-p.Successes():
			got++
			k, _ := m.Key.Encode()
			r.offsets[string(k)] = m.Offset
		case e := <-p.Errors():
			got++
			r.errs = append(r.errs, e.Err)
		}
	}
	if len(r.errs) > 0 {
		return r, r.errs[0]
	}
	return r, nil
}

func TestCommitShowsRecordsAndAbortHidesThem(t *testing.T) {
	bs := kafkatest.Brokers(t)
	topic := unique("txnproducer-commit")
	if err := kafkatest.CreateTopic(bs, topic, 3); err != nil {
		t.Fatal(err)
	}
	defer kafkatest.DeleteTopics(bs, topic)
	p, err := New(bs, config(unique("txnproducer-commit")))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	want := map[string]int64{}
	for _, tx := range []struct {
		prefix string
		n      int
		commit bool
	}{{"a", 700, true}, {"b", 300, false}, {"c", 250, true}} {
		end := p.AbortTxn
		if tx.commit {
			end = p.CommitTxn
		}
		r, err := sendTxn(t, p, topic, tx.prefix, tx.n, end)
		if err != nil {
			t.Fatalf("transaction %s: %v", tx.prefix, err)
		}
		if len(r.offsets) != tx.n {
			t.Fatalf("transaction %s: %d successes for %d records", tx.prefix, len(r.offsets), tx.n)
		}
		if tx.commit {
			for k, off := range r.offsets {
				want[k] = off
			}
		}
		if s := p.TxnStatus(); s&sarama.ProducerTxnFlagReady == 0 {
			t.Fatalf("after transaction %s: status %s, want ready", tx.prefix, s)
		}
	}

	recs := readCommitted(t, bs, topic)
	got := map[string]int64{}
	for _, r := range recs {
		if _, dup := got[r.Key]; dup {
			t.Errorf("%s read twice", r.Key)
		}
		got[r.Key] = r.Offset
	}
	if len(got) != len(want) {
		t.Errorf("read %d committed records, want %d", len(got), len(want))
	}
	for k, off := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s committed but not read", k)
		} else if g != off {
			t.Errorf("%s read at offset %d, acknowledged at %d", k, g, off)
		}
	}
}

func TestOffsetsCommitWithTheTransaction(t *testing.T) {
	bs := kafkatest.Brokers(t)
	topic, group := unique("txnproducer-offsets"), unique("txnproducer-group")
	if err := kafkatest.CreateTopic(bs, topic, 1); err != nil {
		t.Fatal(err)
	}
	defer kafkatest.DeleteTopics(bs, topic)
	p, err := New(bs, config(unique("txnproducer-offsets")))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	meta := sarama.NewConsumerGroupMetadata(group)
	offsets := func(off int64) map[string][]*sarama.PartitionOffsetMetadata {
		return map[string][]*sarama.PartitionOffsetMetadata{topic: {{Partition: 0, Offset: off}}}
	}
	step := func(off int64, end func() error) {
		t.Helper()
		if err := p.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		if err := p.AddOffsetsToTxnWithGroupMetadata(offsets(off), meta); err != nil {
			t.Fatal(err)
		}
		if err := end(); err != nil {
			t.Fatal(err)
		}
	}
	committed := func() int64 {
		t.Helper()
		c, err := kafkatest.Committed(bs, group, topic, []int32{0})
		if err != nil {
			t.Fatal(err)
		}
		return c[0]
	}
	step(42, p.CommitTxn) // offsets only: the transaction holds no record
	if got := committed(); got != 42 {
		t.Fatalf("committed offset %d after a commit of 42", got)
	}
	step(99, p.AbortTxn)
	if got := committed(); got != 42 {
		t.Fatalf("committed offset %d after an abort of 99, want 42 still", got)
	}
}

func TestFencedByANewIncarnation(t *testing.T) {
	bs := kafkatest.Brokers(t)
	topic, id := unique("txnproducer-fenced"), unique("txnproducer-fenced")
	if err := kafkatest.CreateTopic(bs, topic, 2); err != nil {
		t.Fatal(err)
	}
	defer kafkatest.DeleteTopics(bs, topic)
	old, err := New(bs, config(id))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := sendTxn(t, old, topic, "old", 50, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	// The old incarnation's transaction is open; a new one aborts it.
	next, err := New(bs, config(id))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := sendTxn(t, next, topic, "new", 50, next.CommitTxn); err != nil {
		t.Fatal(err)
	}

	// The zombie's next record or its commit fails as fenced, and it stays fatal.
	_, err = sendRecords(old, topic, "zombie", 50)
	if err == nil {
		err = old.CommitTxn()
	}
	if err == nil {
		t.Fatal("a fenced producer committed")
	}
	if !errors.Is(err, sarama.ErrProducerFenced) && !errors.Is(err, sarama.ErrInvalidProducerEpoch) {
		t.Errorf("fenced producer's error %v, want PRODUCER_FENCED or INVALID_PRODUCER_EPOCH", err)
	}
	if s := old.TxnStatus(); s&sarama.ProducerTxnFlagFatalError == 0 {
		t.Errorf("fenced producer's status %s, want fatal", s)
	}
	if err := old.BeginTxn(); err == nil {
		t.Error("a fatal producer began a transaction")
	}

	recs := readCommitted(t, bs, topic)
	for _, r := range recs {
		if !strings.HasPrefix(r.Key, "new-") {
			t.Errorf("read %s: only the new incarnation's transaction committed", r.Key)
		}
	}
	if len(recs) != 50 {
		t.Errorf("read %d records, want the new incarnation's 50", len(recs))
	}
}

func TestTooLargeRecordIsRefusedAlone(t *testing.T) {
	bs := kafkatest.Brokers(t)
	topic := unique("txnproducer-large")
	if err := kafkatest.CreateTopic(bs, topic, 1); err != nil {
		t.Fatal(err)
	}
	defer kafkatest.DeleteTopics(bs, topic)
	c := config(unique("txnproducer-large"))
	c.Producer.MaxMessageBytes = 1000
	p, err := New(bs, c)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	p.Input() <- &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(make([]byte, 1000))}
	select {
	case e := <-p.Errors():
		if !errors.Is(e.Err, sarama.ErrMessageSizeTooLarge) {
			t.Fatalf("error %v, want MESSAGE_TOO_LARGE", e.Err)
		}
	case m := <-p.Successes():
		t.Fatalf("a record larger than Producer.MaxMessageBytes was sent (offset %d)", m.Offset)
	}
	if s := p.TxnStatus(); s&sarama.ProducerTxnFlagFatalError != 0 {
		t.Fatalf("status %s: one refused record made the producer fatal", s)
	}
	if _, err := sendTxn(t, p, topic, "small", 10, p.CommitTxn); err == nil {
		t.Fatal("BeginTxn inside an open transaction succeeded")
	}
	if err := p.AbortTxn(); err != nil {
		t.Fatal(err)
	}
	if _, err := sendTxn(t, p, topic, "small", 10, p.CommitTxn); err != nil {
		t.Fatalf("the transaction after the abort: %v", err)
	}
}

// TestRetriesKeepSequenceNumbers loses the answers of some produce
// requests the broker wrote, and some requests before they reach it: a
// batch without an answer is sent again with its sequence numbers, so the
// broker drops the copy of one it wrote and writes one it did not. Every
// key must be read once, in the order it was sent, at the offset its
// success gave.
func TestRetriesKeepSequenceNumbers(t *testing.T) {
	bs := kafkatest.Brokers(t)
	topic := unique("txnproducer-lost")
	if err := kafkatest.CreateTopic(bs, topic, 3); err != nil {
		t.Fatal(err)
	}
	defer kafkatest.DeleteTopics(bs, topic)
	p, err := open(bs, config(unique("txnproducer-lost")), Options{MaxQueued: DefaultMaxQueued})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var requests, answersLost, requestsLost int
	p.send = func(leader *sarama.Broker, req *sarama.ProduceRequest) (*sarama.ProduceResponse, error) {
		requests++ // one round at a time: no lock needed with one broker
		switch requests % 4 {
		case 1:
			if _, err := leader.Produce(req); err != nil {
				return nil, err
			}
			answersLost++
			return nil, io.ErrUnexpectedEOF
		case 3:
			requestsLost++
			return nil, io.ErrUnexpectedEOF
		}
		return leader.Produce(req)
	}
	p.start()

	want := map[string]int64{}
	for i := 0; i < 10; i++ {
		r, err := sendTxn(t, p, topic, fmt.Sprintf("t%02d", i), 400, p.CommitTxn)
		if err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
		maps.Copy(want, r.offsets)
	}
	t.Logf("%d produce requests: %d answers lost, %d requests lost, %d batches retried",
		requests, answersLost, requestsLost, p.retried.Load())
	if answersLost == 0 || requestsLost == 0 {
		t.Fatal("no answer or no request was lost")
	}

	recs := readCommitted(t, bs, topic)
	checkOnceInOrder(t, recs, len(want))
	for _, r := range recs {
		if off, ok := want[r.Key]; ok && off != r.Offset {
			t.Errorf("%s read at offset %d, acknowledged at %d", r.Key, r.Offset, off)
		}
	}
}

// checkOnceInOrder checks that recs hold n distinct keys "tNN-i", each once
// and in send order within its partition.
func checkOnceInOrder(t *testing.T, recs []kafkatest.Record, n int) {
	t.Helper()
	seen := map[string]bool{}
	last := map[int32]string{}
	for _, r := range recs {
		if seen[r.Key] {
			t.Errorf("%s read twice", r.Key)
		}
		seen[r.Key] = true
		if prev, ok := last[r.Partition]; ok && keyOrder(prev) >= keyOrder(r.Key) {
			t.Errorf("partition %d: %s after %s", r.Partition, r.Key, prev)
		}
		last[r.Partition] = r.Key
	}
	if len(seen) != n {
		t.Errorf("read %d distinct keys, want %d", len(seen), n)
	}
}

// readCommitted reads topic's committed records once no transaction is
// open on it.
func readCommitted(t *testing.T, bs []string, topic string) []kafkatest.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkatest.WaitSettled(ctx, bs, topic); err != nil {
		t.Fatal(err)
	}
	recs, err := kafkatest.ReadAll(ctx, bs, topic)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// keyOrder is the send order of a key "tNN-i".
func keyOrder(key string) int {
	var txn, i int
	fmt.Sscanf(key, "t%d-%d", &txn, &i)
	return txn*1_000_000 + i
}

// TestCommitWaitsForRecordsInInput commits right after sending, without
// Successes (as a producer that only needs the commit's answer does): the
// records still in Input's buffer belong to the transaction too.
func TestCommitWaitsForRecordsInInput(t *testing.T) {
	bs := kafkatest.Brokers(t)
	topic := unique("txnproducer-input")
	if err := kafkatest.CreateTopic(bs, topic, 2); err != nil {
		t.Fatal(err)
	}
	defer kafkatest.DeleteTopics(bs, topic)
	c := config(unique("txnproducer-input"))
	c.Producer.Return.Successes = false
	p, err := open(bs, c, Options{MaxQueued: DefaultMaxQueued})
	if err != nil {
		t.Fatal(err)
	}
	// A slow accumulator: the last records of each transaction are still in
	// Input's buffer when CommitTxn starts.
	p.taking = func() { time.Sleep(200 * time.Microsecond) }
	p.start()
	defer p.Close()
	const txns, perTxn = 5, 1000
	for i := 0; i < txns; i++ {
		if err := p.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < perTxn; j++ {
			select {
			case p.Input() <- &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("t%02d-%d", i, j))}:
			case e := <-p.Errors():
				t.Fatal(e.Err)
			}
		}
		if err := p.CommitTxn(); err != nil {
			t.Fatal(err)
		}
		// Every record sent so far is committed now, none left for the next.
		checkOnceInOrder(t, readCommitted(t, bs, topic), (i+1)*perTxn)
	}
}

func TestNewWithRefusesANegativeQueue(t *testing.T) {
	_, err := NewWith([]string{"127.0.0.1:1"}, config("x"), Options{MaxQueued: -1})
	if err == nil || !strings.Contains(err.Error(), "MaxQueued") {
		t.Fatalf("NewWith with MaxQueued -1: %v, want an error naming MaxQueued", err)
	}
}
