package processor

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// The loop judges the event its claim's goroutine prepared (member.prepare)
// and does not decode the record again: a message handed over with another
// record's preparation is processed as that other event.
func TestProcessJudgesThePreparedEvent(t *testing.T) {
	all := make([]int32, benchPartitions)
	for p := range all {
		all[p] = int32(p)
	}
	prod := &recordingProducer{in: make(chan *sarama.ProducerMessage, 64)}
	m := newTestMember(t, prod, all...)
	record := func(i int) *sarama.ConsumerMessage {
		return &sarama.ConsumerMessage{Topic: m.topo.Inputs[0], Key: []byte("order-0"), Value: benchValue(i),
			Offset: int64(i), Timestamp: time.Now()}
	}
	in := prepared(m, record(2))
	in.msg = record(1)
	processNow(m, benchSession{ctx: context.Background()}, in)

	var outputs [][]byte
	for _, r := range prod.sent() {
		if r.Topic == m.topo.Outputs[0] {
			v, _ := r.Value.Encode()
			outputs = append(outputs, v)
		}
	}
	if len(outputs) != 1 || !bytes.Equal(outputs[0], benchValue(2)) {
		t.Fatalf("outputs %q, want the prepared event %q", outputs, benchValue(2))
	}
	if got := m.tx.state.offsets[m.topo.Inputs[0]][0]; got != 2 {
		t.Fatalf("next offset %d, want 2 (the handed-over message's)", got)
	}
}
