package processor

import (
	"context"
	"strings"
	"testing"
)

// abortingProducer acknowledges every record and counts aborts.
type abortingProducer struct {
	*ackProducer
	aborts int
}

func (p *abortingProducer) AbortTxn() error { p.aborts++; return nil }

// A table partition the member cannot decode fails the message as an error
// from the engine: the transaction is aborted and the member stops with the
// error, as the same message would fail every transaction again.
func TestUnreadableTableStopsTheMember(t *testing.T) {
	prod := &abortingProducer{ackProducer: newAckProducer(t)}
	m := newTestMember(t, prod, 0)
	msg := loopMessage(m.topo, 1) // partition 0, keyed by its event ID
	m.tables.byPartition[0].store.Set(string(msg.Key), []byte("not a seen record"))
	processNow(m, benchSession{ctx: context.Background()}, prepared(m, msg))
	if !m.tx.failed || prod.aborts != 1 {
		t.Fatalf("failed %v after %d aborts, want the transaction aborted once", m.tx.failed, prod.aborts)
	}
	if m.session.fatal == nil || !strings.Contains(m.session.fatal.Error(), "decode table value") {
		t.Fatalf("member stops with %v, want the decode error", m.session.fatal)
	}
	if m.tx.state.dirty || len(m.tx.state.offsets) != 0 {
		t.Fatalf("transaction after the abort: dirty %v, offsets %v", m.tx.state.dirty, m.tx.state.offsets)
	}
}
