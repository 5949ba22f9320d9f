package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/deduptest"
)

// The demo runs the real exactly-once worker on the embedded broker: the
// fast tier's end-to-end check of what `go run ./examples/cloudevents`
// prints (testdata/demo.golden). It is also the check of the outputs'
// header order, which deduptest does not keep.
func TestDemo(t *testing.T) {
	want, err := os.ReadFile("testdata/demo.golden")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if out.String() != string(want) {
		t.Errorf("demo printed\n%s\nwant (testdata/demo.golden)\n%s", out.String(), want)
	}
}

func TestFlags(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr string // "" for none
	}{
		{nil, ""},
		{[]string{"--brokers", "k1:9092", "--state-dir", "/tmp/s", "--instance-id", "notifier-0", "--analytics", "bi.events"}, ""},
		{[]string{"--brokers", "k1:9092"}, "--state-dir: required with --brokers"},
		{[]string{"--state-dir", "/tmp/s"}, "--state-dir: only with --brokers"},
		{[]string{"--notifications", "n", "--analytics", "n"}, `--analytics: "n" is also --notifications`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cfg, err := parseFlags(tt.args)
			if err == nil {
				_, err = topology(cfg)
			}
			if tt.wantErr == "" && err != nil {
				t.Fatalf("err %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// ce is a structured-mode CloudEvent with CloudEvents id ceID.
func ce(ceID, typ, data string) []byte {
	return []byte(`{"specversion":"1.0","id":"` + ceID + `","source":"/orders","type":"` + typ + `","data":` + data + `}`)
}

func TestHandler(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	top, err := topology(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := deduptest.New(t, top)
	shipped := `{"eventId":"e1","orderId":"o-1","customerId":"c-1","carrier":"UPS","trackingCode":"1Z9"}`
	d.Send("o-1", ce("ce-1", TypeShipped, shipped))
	d.Send("o-1", ce("ce-2", TypeShipped, shipped)) // published again: new CloudEvents id, same event
	d.Send("o-2", ce("ce-3", "com.example.order.created", `{"eventId":"e2","orderId":"o-2"}`))
	d.Send("o-3", ce("ce-4", TypeShipped, `{"eventId":"e3","orderId":"o-3"}`))                   // no customerId
	d.Send("o-4", ce("ce-5", TypeShipped, `{"eventId":"e4","orderId":"o-4","customerId":true}`)) // does not parse

	n := d.Output(cfg.notify)
	if len(n) != 1 || n[0].Key != "c-1" {
		t.Fatalf("notifications %+v, want one keyed c-1", n)
	}
	var msg notification
	if err := json.Unmarshal(n[0].Value, &msg); err != nil || msg.EventID != "e1" ||
		msg.Text != "Your order o-1 has shipped with UPS, tracking code 1Z9." {
		t.Errorf("notification %s (%v)", n[0].Value, err)
	}
	a := d.Output(cfg.analytics)
	if len(a) != 2 {
		t.Fatalf("analytics %+v, want e1 and e2", a)
	}
	for i, want := range []struct{ key, id, typ, value string }{
		{"o-1", "e1", TypeShipped, shipped},
		{"o-2", "e2", "com.example.order.created", `{"eventId":"e2","orderId":"o-2"}`},
	} {
		id, _ := a[i].Headers.Get("ce_id")
		typ, _ := a[i].Headers.Get("ce_type")
		if a[i].Key != want.key || string(id) != want.id || string(typ) != want.typ || string(a[i].Value) != want.value {
			t.Errorf("analytics[%d] = key %s ce_id %s ce_type %s %s, want %+v", i, a[i].Key, id, typ, a[i].Value, want)
		}
	}
	dl := d.DeadLetters()
	if len(dl) != 2 || dl[0].Reason != dedup.ReasonHandlerPermanent || dl[1].Reason != dedup.ReasonHandlerPermanent ||
		!strings.Contains(dl[0].Error, "customerId are required") || !strings.Contains(dl[1].Error, "cannot unmarshal") {
		t.Fatalf("dead letters %+v, want e3 and e4 rejected as %s", dl, dedup.ReasonHandlerPermanent)
	}
	if d.Seen("e1") == nil || d.Seen("e2") == nil || d.Seen("e3") != nil || d.Seen("e4") != nil {
		t.Error("e1 and e2 must be marked seen, the rejected e3 and e4 not")
	}
	// The producer fixed e3 and sends it again: a rejected event was not
	// marked seen, so it is processed now.
	d.Send("o-3", ce("ce-6", TypeShipped, `{"eventId":"e3","orderId":"o-3","customerId":"c-3"}`))
	if n := d.Output(cfg.notify); len(n) != 1 || n[0].Key != "c-3" {
		t.Errorf("notifications after the fixed e3: %+v, want one keyed c-3", n)
	}
}
