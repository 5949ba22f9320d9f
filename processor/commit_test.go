package processor

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// storedKeys counts the table records in s's LevelDB.
func storedKeys(t *testing.T, s *store) int64 {
	t.Helper()
	it := s.db.NewIterator(util.BytesPrefix([]byte{prefixData}), nil)
	defer it.Release()
	n := int64(0)
	for it.Next() {
		n++
	}
	return n
}

// While a sealed transaction commits, the next one reads through both
// overlays and its writes stay out of LevelDB until it is applied itself;
// the entry count must match LevelDB's records after each, including for a
// key whose LevelDB read the sealed transaction cached and then wrote.
func TestStoreSealedTransaction(t *testing.T) {
	s, err := openStore(t.TempDir(), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v1, v2 := seenValue(t, time.Now().Add(time.Hour)), seenValue(t, time.Now().Add(2*time.Hour))
	s.Set("a", v1)
	if err := s.Apply(1); err != nil {
		t.Fatal(err)
	}

	// Transaction 1: delete a, read then write the new d.
	s.Delete("a")
	if v, _ := s.Get("d"); v != nil {
		t.Fatal("d before it was written")
	}
	s.Set("d", v1)
	if !s.Seal() {
		t.Fatal("Seal found nothing to seal")
	}
	if s.Seal() {
		t.Fatal("Seal of an empty overlay reported something")
	}

	// Transaction 2, while 1 commits: it sees 1's writes.
	if v, _ := s.Get("a"); v != nil {
		t.Fatal("a visible though the sealed transaction deleted it")
	}
	if v, _ := s.Get("d"); string(v) != string(v1) {
		t.Fatal("sealed write of d not visible")
	}
	s.Set("c", v1)
	s.Set("a", v2)

	delta, err := s.WriteSealed(2)
	if err != nil {
		t.Fatal(err)
	}
	s.DoneSealed(delta)
	if next, _ := s.ChangelogNext(); next != 2 {
		t.Fatalf("changelog next %d after the sealed transaction, want 2", next)
	}
	if got, want := s.entries, storedKeys(t, s); got != want || got != 1 {
		t.Fatalf("after the sealed transaction: entries %d, LevelDB %d records, want 1 (d)", got, want)
	}
	if v, _ := s.Get("c"); string(v) != string(v1) {
		t.Fatal("the open transaction's write of c was lost by ApplySealed")
	}

	// Transaction 2 commits, with a write of d it did not read: the count
	// must come from LevelDB now, not from transaction 1's cached miss.
	s.Set("d", v2)
	if err := s.Apply(3); err != nil {
		t.Fatal(err)
	}
	if got, want := s.entries, storedKeys(t, s); got != want || got != 3 {
		t.Fatalf("after both: entries %d, LevelDB %d records, want 3 (a, c, d)", got, want)
	}

	// An abort drops a sealed transaction and the open one.
	s.Set("x", v1)
	s.Seal()
	s.Set("y", v1)
	s.Drop()
	for _, k := range []string{"x", "y"} {
		if v, _ := s.Get(k); v != nil {
			t.Fatalf("%s visible after Drop", k)
		}
	}
}

// commitProducer acknowledges every record at once and holds each CommitTxn
// until the test answers on commits.
type commitProducer struct {
	sarama.AsyncProducer // not implemented: calling anything else panics
	in                   chan *sarama.ProducerMessage
	acks                 chan *sarama.ProducerMessage
	nacks                chan *sarama.ProducerError
	commits              chan chan error // CommitTxn sends one, returns what the test answers

	mu      sync.Mutex
	sent    []string // output record keys, in the order the producer got them
	aborted int
	offset  int64
}

func newCommitProducer(t *testing.T) *commitProducer {
	p := &commitProducer{in: make(chan *sarama.ProducerMessage, 256), acks: make(chan *sarama.ProducerMessage, 256),
		nacks: make(chan *sarama.ProducerError), commits: make(chan chan error)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range p.in {
			p.mu.Lock()
			if msg.Topic == "orders-deduped" {
				k, _ := msg.Key.Encode()
				p.sent = append(p.sent, string(k))
			}
			msg.Offset = p.offset
			p.offset++
			p.mu.Unlock()
			p.acks <- msg
		}
	}()
	t.Cleanup(func() {
		close(p.in)
		for { // take acks nobody read, so a failed test ends instead of hanging
			select {
			case <-p.acks:
			case <-done:
				return
			}
		}
	})
	return p
}

func (p *commitProducer) Input() chan<- *sarama.ProducerMessage     { return p.in }
func (p *commitProducer) Successes() <-chan *sarama.ProducerMessage { return p.acks }
func (p *commitProducer) Errors() <-chan *sarama.ProducerError      { return p.nacks }
func (p *commitProducer) TxnStatus() sarama.ProducerTxnStatusFlag {
	return sarama.ProducerTxnFlagInTransaction
}
func (p *commitProducer) AddOffsetsToTxnWithGroupMetadata(map[string][]*sarama.PartitionOffsetMetadata, *sarama.ConsumerGroupMetadata) error {
	return nil
}

func (p *commitProducer) CommitTxn() error {
	answer := make(chan error)
	p.commits <- answer
	return <-answer
}

func (p *commitProducer) AbortTxn() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.aborted++
	return nil
}

func (p *commitProducer) outputs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.sent...)
}

// commitSession is a group session with the identity a commit sends.
type commitSession struct{ benchSession }

func (commitSession) MemberID() string    { return "member-1" }
func (commitSession) GenerationID() int32 { return 1 }

// The loop goes on processing while a transaction's Kafka commit runs, but
// what it produces meanwhile must not reach the producer (it would join the
// committing transaction) until that commit succeeded, and must be dropped
// with it when it failed. Its table reads must see the committing
// transaction's writes all along.
func TestProcessingWhileCommitting(t *testing.T) {
	prod := newCommitProducer(t)
	var all []int32 // every partition, so no event is looped
	for p := range int32(benchPartitions) {
		all = append(all, p)
	}
	m := newTestMember(t, prod, all...)
	stored := func() (n int64) {
		for _, pt := range m.tables.byPartition {
			n += storedKeys(t, pt.store)
		}
		return n
	}
	topo := m.topo
	sess := commitSession{benchSession{ctx: t.Context()}}
	event := func(i int) inbound { return prepared(m, inputMessage(topo, i)) }
	awaitCommitTxn := func() chan error {
		t.Helper()
		select {
		case answer := <-prod.commits:
			return answer
		case <-time.After(10 * time.Second):
			t.Fatal("no CommitTxn")
			return nil
		}
	}

	handleNow(m, sess, event(1))
	m.commit(sess)
	answer := awaitCommitTxn() // transaction 1 is committing now
	handleNow(m, sess, event(2))
	handleNow(m, sess, event(1)) // a duplicate of the committing transaction's event
	if got := prod.outputs(); len(got) != 1 {
		t.Fatalf("producer got outputs %v while transaction 1 committed, want only event 1's", got)
	}
	if len(m.tx.staged) != 2 { // event 2's output and changelog record
		t.Fatalf("%d records held back, want 2 (event 2's; event 1 again is a duplicate)", len(m.tx.staged))
	}
	answer <- nil
	m.awaitCommit()
	m.flush(&m.tx.state) // the producer has recorded what it acknowledged
	if got := prod.outputs(); len(got) != 2 {
		t.Fatalf("outputs %v after transaction 1 committed, want events 1 and 2", got)
	}
	if n := stored(); n != 1 {
		t.Fatalf("LevelDB holds %d records after transaction 1, want 1", n)
	}

	// Transaction 2 (event 2) fails to commit; event 3, processed meanwhile,
	// is dropped with it.
	m.commit(sess)
	answer = awaitCommitTxn()
	handleNow(m, sess, event(3))
	answer <- errors.New("broker says no")
	m.awaitCommit()
	if !m.tx.failed || len(m.tx.staged) != 0 || prod.aborted != 1 {
		t.Fatalf("after the failed commit: failed %v, %d records held, %d aborts; want true, 0, 1", m.tx.failed, len(m.tx.staged), prod.aborted)
	}
	if got := prod.outputs(); len(got) != 2 {
		t.Fatalf("outputs %v, want event 3's never sent", got)
	}
	if n := stored(); n != 1 {
		t.Fatalf("LevelDB holds %d records, want 1: the failed transactions must leave nothing", n)
	}
	for p, pt := range m.tables.byPartition {
		if pt.store.Dirty() || len(pt.store.writes.sealed) > 0 {
			t.Fatalf("partition %d: writes of the failed transactions still held", p)
		}
	}
}
