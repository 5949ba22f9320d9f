package deduptest_test

import (
	"fmt"
	"testing"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/deduptest"
)

// The inputs of a topology share its table: an event that arrives on one
// input and then on another is written once.
func TestSendToSeveralInputs(t *testing.T) {
	top, err := dedup.Define("g", dedup.Input("orders", "orders-retry"), dedup.Output("out"))
	if err != nil {
		t.Fatal(err)
	}
	d := deduptest.New(t, top)
	ev := func(id string) []byte { return fmt.Appendf(nil, `{"eventId":%q}`, id) }
	d.Send("k1", ev("e1"))                   // the first input
	d.SendTo("orders-retry", "k1", ev("e1")) // the same event on the other: skipped
	d.SendTo("orders-retry", "k2", ev("e2"))
	d.SendTo("orders", "k2", ev("e2")) // and back: skipped
	out := d.Output("out")
	if len(out) != 2 || string(out[0].Value) != string(ev("e1")) || string(out[1].Value) != string(ev("e2")) {
		t.Fatalf("output %q, want e1 and e2 once each", out)
	}
	if dl := d.DeadLetters(); len(dl) != 0 {
		t.Fatalf("dead letters %+v", dl)
	}
	if d.Seen("e1") == nil || d.Seen("e2") == nil {
		t.Fatal("not marked")
	}
}
