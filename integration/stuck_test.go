package integration

import (
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/processor"
)

// A transaction that another instance of the group left open on the loop
// topic (it was killed and the group has not noticed yet: its session
// timeout has not passed) holds the loop partitions it wrote to, which live
// members read committed-only. The worker aborts it once it stayed open for
// FenceStuckAfter instead of waiting for it to time out. The dead instance
// here is a transactional producer with a member's ID that wrote to every
// loop partition and never ends its transaction (timeout two minutes, more
// than the test's 60 s wait); it is not a member of the group, so no
// rebalance fences it either.
func TestStuckTransactionOfADeadInstanceIsAborted(t *testing.T) {
	const partitions = 3
	e := newEnv(t, partitions)
	group := e.group("eos-stuck")
	// Two instances: a member handles an event whose ID falls in a
	// partition it owns at once, and loops only those for the other's.
	hooks, obs := &fenceHooks{}, &counter{}
	a := e.startEOS(e.topology(group, obs), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooks}})
	b := e.startEOS(e.topology(group, obs), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooks}})
	until(t, 60*time.Second, "both instances to hold their partitions", func() bool {
		return a.ready() && b.ready() && groupMembersWithPartitions(t, e.brokers, group) == 2
	})

	dead := deadInstanceTxn(t, e.brokers, group+"-dead-0", group+"-loop", partitions)
	in := events("s", 60)
	e.produce(in...)
	start := time.Now()
	// The group's committed loop offsets cannot tell while the transaction
	// is open (the end of a loop partition read committed-only is where it
	// begins): wait for the handler to have seen every event (those that go
	// through the loop reach it only once the transaction was aborted). The
	// handler runs before its transaction commits, so then wait for the
	// group's commits before reading the output.
	until(t, 60*time.Second, "every event to be processed", func() bool {
		processed, _ := obs.counts()
		return processed >= len(in)
	})
	took := time.Since(start)
	e.waitProcessed(group)
	e.exactlyOnce(in)
	if obs.looped() == 0 {
		t.Fatal("no event went through the loop topic: nothing was held, the test proves nothing")
	}
	// Both instances may fence it at once; at least one must have.
	if n := hooks.stuck.Load(); n < 1 {
		t.Fatal("no instance aborted the dead instance's stuck transaction")
	}
	if err := dead.CommitTxn(); err == nil {
		t.Fatal("the dead instance's transaction committed after the worker aborted it")
	}
	t.Logf("processed everything %v after the events were written, past a transaction left open on every loop partition "+
		"(fenced as stuck after %v)", took.Round(time.Millisecond), processor.DefaultFenceStuckAfter)
}

// deadInstanceTxn opens a transaction as transactional ID id, writes one
// record to each partition of topic and leaves it open, as an instance
// killed mid-transaction does.
func deadInstanceTxn(t *testing.T, brokers []string, id, topic string, partitions int32) sarama.SyncProducer {
	t.Helper()
	c := txnProducerConfig(id)
	c.Producer.Transaction.Timeout = 2 * time.Minute
	p, err := sarama.NewSyncProducer(brokers, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	for part := range partitions {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: part,
			Key: sarama.StringEncoder("dead"), Value: sarama.StringEncoder("never committed")}); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// groupMembersWithPartitions is how many of group's members the coordinator
// lists with at least one partition assigned.
func groupMembersWithPartitions(t *testing.T, brokers []string, group string) int {
	t.Helper()
	n := 0
	for _, m := range describeGroup(t, brokers, group).Members {
		a, err := m.GetMemberAssignment()
		if err != nil {
			t.Fatalf("member %s's assignment: %v", m.ClientId, err)
		}
		if a != nil && len(a.Topics) > 0 {
			n++
		}
	}
	return n
}

// txnProducerConfig is a transactional producer's config for ID id that
// writes to the partition each message names.
func txnProducerConfig(id string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	c.Producer.Idempotent = true
	c.Producer.Transaction.ID = id
	c.Net.MaxOpenRequests = 1
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewManualPartitioner
	return c
}
