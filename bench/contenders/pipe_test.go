package contenders

import (
	"testing"

	"github.com/IBM/sarama"
)

// markSession records MarkOffset calls.
type markSession struct {
	sarama.ConsumerGroupSession
	marked []int64
}

func (s *markSession) MarkOffset(_ string, _ int32, off int64, _ string) {
	s.marked = append(s.marked, off)
}

func TestTrackerMarksInOrder(t *testing.T) {
	sess := &markSession{}
	tr := &tracker{sess: sess, topic: "in", partition: 0}
	for _, off := range []int64{10, 11, 12, 14} {
		tr.add(off)
	}
	tr.finish(11) // 10 still in flight: nothing to mark
	if len(sess.marked) != 0 {
		t.Fatalf("marked %v before offset 10 finished", sess.marked)
	}
	tr.finish(10)
	tr.finish(14)
	tr.finish(12)
	tr.finish(99) // unknown (an earlier session's): ignored
	want := []int64{12, 15}
	if len(sess.marked) != len(want) || sess.marked[0] != want[0] || sess.marked[1] != want[1] {
		t.Fatalf("marked %v, want %v (the offset after each finished prefix)", sess.marked, want)
	}
	if tr.inFlight() != 0 {
		t.Fatalf("%d in flight", tr.inFlight())
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Kind: Redis, Brokers: []string{"b:9092"}, Input: "i", Output: "o", Group: "g",
		CommitInterval: 1, RedisAddr: "r:6379", RedisTTL: 1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := ok
	bad.Kind, bad.StateDir = Exactly, ""
	if bad.Validate() == nil {
		t.Fatal("the worker without a state dir validated")
	}
	bad = ok
	bad.Kind = "memcached"
	if bad.Validate() == nil {
		t.Fatal("an unknown kind validated")
	}
}
