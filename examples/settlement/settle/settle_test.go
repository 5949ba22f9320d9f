package settle_test

import (
	"encoding/json"
	"testing"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/deduptest"
	"github.com/dedupkit/dedup/examples/settlement/settle"
)

func TestSettlementHandler(t *testing.T) {
	top, err := dedup.Define("settlement-service",
		dedup.Input("order.events"),
		dedup.EventID(dedup.JSONField("eventId")),
		dedup.Output("settlements", "audit"),
		dedup.Handle(settle.Handler("settlements", "audit")))
	if err != nil {
		t.Fatal(err)
	}
	d := deduptest.New(t, top)
	paid := []byte(`{"eventId":"e1","aggregateId":"order-1","type":"OrderPaid","payload":{"orderId":"order-1","paymentId":"pay-9","amount":12.5}}`)
	d.Send("order-1", paid)
	d.Send("order-1", paid) // a redelivery: skipped
	d.Send("order-1", []byte(`{"eventId":"e2","aggregateId":"order-1","type":"OrderShipped","payload":{}}`))
	d.Send("order-2", []byte(`{"eventId":"e3","aggregateId":"order-2","type":"OrderPaid","payload":"not an object"}`))

	s := d.Output("settlements")
	if len(s) != 1 || s[0].Key != "pay-9" {
		t.Fatalf("settlements %+v, want one keyed pay-9", s)
	}
	var got settle.Settlement
	if err := json.Unmarshal(s[0].Value, &got); err != nil || got.EventID != "e1" || got.Amount != 12.5 {
		t.Fatalf("settlement %s (%v)", s[0].Value, err)
	}
	if a := d.Output("audit"); len(a) != 1 || a[0].Key != "e1" {
		t.Fatalf("audit %+v, want one keyed e1", a)
	}
	dl := d.DeadLetters()
	if len(dl) != 1 || dl[0].Reason != dedup.ReasonHandlerPermanent {
		t.Fatalf("dead letters %+v, want e3 as %s", dl, dedup.ReasonHandlerPermanent)
	}
	if d.Seen("e1") == nil || d.Seen("e2") == nil || d.Seen("e3") != nil {
		t.Fatal("e1 and e2 must be marked seen, the rejected e3 not")
	}
}
