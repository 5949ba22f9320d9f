package processor

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/resources"
)

// benchSession is the part of a group session process uses.
type benchSession struct {
	sarama.ConsumerGroupSession
	ctx context.Context
}

func (s benchSession) Context() context.Context { return s.ctx }

// benchMember is a member with partition 0's store and no Kafka: process
// runs the topology's callback exactly as in a session, queueing records.
func benchMember(b *testing.B) (*member, *store) {
	b.Helper()
	m := newTestMember(b, newAckProducer(b), 0)
	return m, m.tables.byPartition[0].store
}

// benchPartitions is the partition count of test members, as in the bench.
const benchPartitions = 12

// newTestMember is a member of a group whose topics have benchPartitions
// partitions, with the stores of the given ones and no Kafka.
func newTestMember(tb testing.TB, producer sarama.AsyncProducer, partitions ...int32) *member {
	tb.Helper()
	topo := &dedup.Topology{Group: "bench", Inputs: []string{"orders"}, Outputs: []string{"orders-deduped"}, DLQ: "bench-dlq",
		KeyType: dedup.KeyEventID, Retention: dedup.DefaultRetention,
		EventID: dedup.JSONField("eventId"), Handler: dedup.Forward(), HandlerRetries: 3,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg := &Config{Brokers: []string{"unused:9092"}, StateDir: tb.TempDir()}
	cfg.setDefaults()
	m := &member{cfg: cfg, topo: topo, hooks: nil, log: cfg.Logger, memberName: "bench-0",
		tableTopic: topo.TableTopic(), loopTopic: topo.LoopTopic(), partitions: benchPartitions,
		tables: tableSet{byPartition: map[int32]*partitionTable{}}, tx: transaction{state: newTxnState(), producer: producer, resources: resources.New()},
		session: sessionState{cancelSession: func() {}, calls: newCalls(topo.Calls(), nil)}}
	m.tx.handlerCtx = resources.With(context.Background(), m.tx.resources)
	for _, p := range partitions {
		s, err := openStore(tb.TempDir(), seenExpiry, nil)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		m.tables.own(&partitionTable{m: m, p: p, store: s})
	}
	return m
}

// processNow processes in as the loop does, its handler call included.
func processNow(m *member, sess sarama.ConsumerGroupSession, in inbound) {
	m.process(sess, in)
	finishCalls(m, sess)
}

// handleNow handles in as the loop does, its handler call included.
func handleNow(m *member, sess sarama.ConsumerGroupSession, in inbound) {
	m.handle(sess, in)
	finishCalls(m, sess)
}

// finishCalls waits for the member's running calls and finishes them.
func finishCalls(m *member, sess sarama.ConsumerGroupSession) {
	for m.session.calls.running > 0 {
		m.finishCall(sess, <-m.session.calls.results)
	}
}

// ackProducer acknowledges every record at once, standing in for the
// transactional producer; its goroutine ends when the benchmark does.
type ackProducer struct {
	sarama.AsyncProducer // not implemented: calling anything else panics
	in                   chan *sarama.ProducerMessage
	acks                 chan *sarama.ProducerMessage
	nacks                chan *sarama.ProducerError
}

func newAckProducer(tb testing.TB) *ackProducer {
	p := &ackProducer{in: make(chan *sarama.ProducerMessage, 256), acks: make(chan *sarama.ProducerMessage, 256),
		nacks: make(chan *sarama.ProducerError)}
	go func() {
		for msg := range p.in {
			p.acks <- msg
		}
	}()
	tb.Cleanup(func() { close(p.in) })
	return p
}

func (p *ackProducer) Input() chan<- *sarama.ProducerMessage     { return p.in }
func (p *ackProducer) Successes() <-chan *sarama.ProducerMessage { return p.acks }
func (p *ackProducer) Errors() <-chan *sarama.ProducerError      { return p.nacks }
func (p *ackProducer) TxnStatus() sarama.ProducerTxnStatusFlag {
	return sarama.ProducerTxnFlagInTransaction
}

func benchValue(i int) []byte {
	return []byte(`{"eventId":"evt-bench-` + strconv.Itoa(i) + `","aggregateId":"order-` + strconv.Itoa(i/5) +
		`","type":"OrderPaid","occurredAt":"2026-12-02T18:00:00.123Z","payload":{"orderId":"order-` + strconv.Itoa(i/5) +
		`","paymentId":"pay-` + strconv.Itoa(i) + `","amount":3456.50,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx` +
		`xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}`)
}

// inputMessage is event i as the input topic holds it: keyed by its
// aggregate, with one header of its own.
func inputMessage(topo *dedup.Topology, i int) *sarama.ConsumerMessage {
	return &sarama.ConsumerMessage{Topic: topo.Inputs[0], Key: []byte("order-" + strconv.Itoa(i/5)),
		Value: benchValue(i), Offset: int64(i), Timestamp: time.Now(),
		Headers: []*sarama.RecordHeader{{Key: []byte("bench-rec"), Value: []byte(strconv.Itoa(i))}}}
}

// loopMessage is event i as it comes back from <group>-loop, keyed by its
// event ID, with the source position in headers.
func loopMessage(topo *dedup.Topology, i int) *sarama.ConsumerMessage {
	h := func(k, v string) *sarama.RecordHeader { return &sarama.RecordHeader{Key: []byte(k), Value: []byte(v)} }
	return &sarama.ConsumerMessage{Topic: topo.LoopTopic(), Partition: 0, Offset: int64(i),
		Key: []byte("evt-bench-" + strconv.Itoa(i)), Value: benchValue(i), Timestamp: time.Now(),
		Headers: []*sarama.RecordHeader{h("bench-rec", strconv.Itoa(i)), h("dedup-src-key", "order-"+strconv.Itoa(i/5)),
			h("dedup-src-topic", topo.Inputs[0]), h("dedup-src-partition", "3"), h("dedup-src-offset", strconv.Itoa(i)),
			h("dedup-src-time", "2026-12-02T18:00:00.123Z")}}
}

// prepared is msg as a claim's goroutine hands it to the loop.
func prepared(m *member, msg *sarama.ConsumerMessage) inbound {
	var keys headerKeys
	return m.prepare(&keys, msg)
}

// commitEvery stands in for the transaction: every n messages the overlays
// are applied to LevelDB and the queue emptied, as after a commit (timer off).
func commitEvery(b *testing.B, m *member, i, n int) {
	if (i+1)%n != 0 {
		return
	}
	b.StopTimer()
	for _, t := range m.tables.byPartition {
		if !t.store.Dirty() {
			continue
		}
		if err := t.store.Apply(int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	m.flush(&m.tx.state)
	m.tx.state = newTxnState()
	b.StartTimer()
}

// BenchmarkProcess is the exactly-once runtime's per-message work: the
// topology's engine under txnContext (decode, key, table lookup through the
// overlay, handler, queueing the output and changelog records).
func BenchmarkProcess(b *testing.B) {
	sess := benchSession{ctx: context.Background()}
	var keys headerKeys                      // as a claim's goroutine keeps them
	b.Run("first-seen", func(b *testing.B) { // from the loop topic: judged, handled, marked
		m, _ := benchMember(b)
		msgs := make([]*sarama.ConsumerMessage, b.N)
		for i := range msgs {
			msgs[i] = loopMessage(m.topo, i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i, msg := range msgs {
			processNow(m, sess, m.prepare(&keys, msg))
			commitEvery(b, m, i, 1000)
		}
	})
	b.Run("duplicate", func(b *testing.B) { // seen before (in LevelDB): skipped
		m, s := benchMember(b)
		const seen = 10000
		for i := 0; i < seen; i++ {
			processNow(m, sess, m.prepare(&keys, loopMessage(m.topo, i)))
		}
		if err := s.Apply(seen); err != nil {
			b.Fatal(err)
		}
		msgs := make([]*sarama.ConsumerMessage, 1024)
		for i := range msgs {
			msgs[i] = loopMessage(m.topo, i*7%seen)
		}
		m.flush(&m.tx.state)
		m.tx.state = newTxnState()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			processNow(m, sess, m.prepare(&keys, msgs[i%len(msgs)]))
		}
		if m.tx.state.sent != 0 {
			b.Fatalf("%d records sent for duplicates", m.tx.state.sent)
		}
	})
	b.Run("rekey", func(b *testing.B) { // from the input, keyed by aggregate, another member's: looped
		m, _ := benchMember(b)
		msgs := make([]*sarama.ConsumerMessage, 0, 1024)
		for i := 0; len(msgs) < cap(msgs); i++ {
			if hashPartition("evt-bench-"+strconv.Itoa(i), benchPartitions) == 0 {
				continue // judged in place, not looped
			}
			msgs = append(msgs, inputMessage(m.topo, i))
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			processNow(m, sess, m.prepare(&keys, msgs[i%len(msgs)]))
			commitEvery(b, m, i, 1000)
		}
	})
	b.Run("prepare", func(b *testing.B) { // a claim's goroutine's part of an input record, outside the loop
		m, _ := benchMember(b)
		msgs := make([]*sarama.ConsumerMessage, 1024)
		for i := range msgs {
			msgs[i] = inputMessage(m.topo, i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if in := m.prepare(&keys, msgs[i%len(msgs)]); in.prep == nil {
				b.Fatal("not prepared")
			}
		}
	})
	b.Run("rekey-owned", func(b *testing.B) { // from the input, keyed by aggregate, this member's: judged at once
		all := make([]int32, benchPartitions)
		for p := range all {
			all[p] = int32(p)
		}
		m := newTestMember(b, newAckProducer(b), all...)
		msgs := make([]*sarama.ConsumerMessage, b.N)
		for i := range msgs {
			msgs[i] = inputMessage(m.topo, i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i, msg := range msgs {
			processNow(m, sess, m.prepare(&keys, msg))
			commitEvery(b, m, i, 1000)
		}
		b.StopTimer()
		if m.tx.state.sent != 2*(b.N%1000) {
			b.Fatalf("%d records sent since the last commit for %d first-seen events, want an output and a changelog record each",
				m.tx.state.sent, b.N%1000)
		}
	})
	b.Run("norekey", func(b *testing.B) { // --rekey=never: judged in the partition it arrived in, runs of 64 per partition as fetched
		all := make([]int32, benchPartitions)
		for p := range all {
			all[p] = int32(p)
		}
		m := newTestMember(b, newAckProducer(b), all...)
		m.topo.Rekey = dedup.RekeyNever
		msgs := make([]*sarama.ConsumerMessage, b.N)
		for i := range msgs {
			msgs[i] = inputMessage(m.topo, i)
			msgs[i].Partition = int32(i/64) % benchPartitions
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i, msg := range msgs {
			processNow(m, sess, m.prepare(&keys, msg))
			commitEvery(b, m, i, 1000)
		}
	})
}
