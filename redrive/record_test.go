package redrive

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
)

func hdr(kv ...string) []*sarama.RecordHeader {
	var h []*sarama.RecordHeader
	for i := 0; i+1 < len(kv); i += 2 {
		h = append(h, &sarama.RecordHeader{Key: []byte(kv[i]), Value: []byte(kv[i+1])})
	}
	return h
}

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// letter is a dead letter as the engine writes it: the event's headers,
// then the dead-letter headers.
func letter(reason string, extra ...string) deadLetter {
	h := append([]string{"trace", "t1", "x", "1", "x", "2"},
		dedup.HeaderDLQReason, reason, dedup.HeaderDLQError, "boom", dedup.HeaderDLQGroup, "g",
		dedup.HeaderDLQTopic, "orders", dedup.HeaderDLQPartition, "2", dedup.HeaderDLQOffset, "41")
	h = append(h, extra...)
	return parseDeadLetter("g-dlq", 0, 7, t0, &sarama.Record{Key: []byte("agg-1"), Value: []byte(`{"eventId":"e1"}`), Headers: hdr(h...)})
}

func TestParseDeadLetter(t *testing.T) {
	d := letter(dedup.ReasonHandlerError)
	if d.reason != dedup.ReasonHandlerError || !d.hasReason || d.group != "g" || d.srcTopic != "orders" || d.srcPart != 2 || d.srcOffset != 41 || d.cut {
		t.Fatalf("parsed %+v", d)
	}
	for _, tt := range []struct {
		name, part string
		want       int32
	}{{"number", "5", 5}, {"negative", "-1", -1}, {"garbage", "two", -1}, {"too large", "99999999999", -1}} {
		d := parseDeadLetter("g-dlq", 0, 0, t0, &sarama.Record{Headers: hdr(dedup.HeaderDLQPartition, tt.part)})
		if d.srcPart != tt.want {
			t.Errorf("%s: partition %q read as %d, want %d", tt.name, tt.part, d.srcPart, tt.want)
		}
	}
	if d := letter(dedup.ReasonTooLarge, dedup.HeaderDLQOriginalSize, "2000000"); !d.cut || d.again {
		t.Error("a dead letter with dlq-original-size is not seen as cut")
	}
	if d := letter(dedup.ReasonHandlerError, HeaderRedrivenFrom, "g-dlq/0/1"); !d.again {
		t.Error("a dead letter of a re-driven copy is not seen as one")
	}
}

func TestFilter(t *testing.T) {
	base := Config{Group: "g"}
	for _, tt := range []struct {
		name string
		cfg  func(*Config)
		d    deadLetter
		want string
	}{
		{"no filter", func(*Config) {}, letter("handler-error"), ""},
		{"reason in the set", func(c *Config) { c.Reasons = []string{"too-old", "handler-error"} }, letter("handler-error"), ""},
		{"reason not in the set", func(c *Config) { c.Reasons = []string{"too-old"} }, letter("handler-error"), FilterReason},
		{"another group's", func(c *Config) { c.Group = "other" }, letter("handler-error"), FilterGroup},
		{"from, inclusive", func(c *Config) { c.From = t0 }, letter("handler-error"), ""},
		{"before from", func(c *Config) { c.From = t0.Add(time.Millisecond) }, letter("handler-error"), FilterTime},
		{"to, exclusive", func(c *Config) { c.To = t0 }, letter("handler-error"), FilterTime},
		{"before to", func(c *Config) { c.To = t0.Add(time.Millisecond) }, letter("handler-error"), ""},
		{"group filter first", func(c *Config) { c.Group, c.Reasons = "other", []string{"too-old"} }, letter("handler-error"), FilterGroup},
		{"no dlq-group: not another group's", func(*Config) {},
			parseDeadLetter("g-dlq", 0, 0, t0, &sarama.Record{Headers: hdr(dedup.HeaderDLQReason, "handler-error")}), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.cfg(&c)
			c = c.withDefaults()
			if got := c.filter(&tt.d); got != tt.want {
				t.Errorf("filter = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTarget(t *testing.T) {
	noSource := parseDeadLetter("g-dlq", 0, 0, t0, &sarama.Record{Headers: hdr(dedup.HeaderDLQReason, "handler-error", dedup.HeaderDLQGroup, "g")})
	loopSource := letter("handler-error", dedup.HeaderDLQTopic, "g-loop") // the last header wins
	for _, tt := range []struct {
		name      string
		target    string
		d         deadLetter
		wantTopic string
		wantWhy   string
	}{
		{"the source topic", "", letter("handler-error"), "orders", ""},
		{"the target given", "retry", letter("handler-error"), "retry", ""},
		{"cut", "", letter("record-too-large", dedup.HeaderDLQOriginalSize, "9"), "", WhyCut},
		{"bad loop record", "retry", letter(dedup.ReasonBadLoopRecord), "", WhyBadLoop},
		{"no source", "", noSource, "", WhyNoSource},
		{"no source, a target", "retry", noSource, "retry", ""},
		{"not a dead letter", "", parseDeadLetter("g-dlq", 0, 0, t0, &sarama.Record{}), "", WhyNotDeadLetter},
		{"source is the loop topic", "", loopSource, "", WhyInternal},
		{"source is the table topic", "", letter("handler-error", dedup.HeaderDLQTopic, "g-table"), "", WhyInternal},
		{"source is the dead-letter topic", "", letter("handler-error", dedup.HeaderDLQTopic, "g-dlq"), "", WhyInternal},
		{"source is the state topic", "", letter("handler-error", dedup.HeaderDLQTopic, "g-redrive"), "", WhyInternal},
		{"the dlq-group's loop topic", "", letter("handler-error", dedup.HeaderDLQGroup, "h", dedup.HeaderDLQTopic, "h-loop"), "", WhyInternal},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{Group: "g", Target: tt.target}.withDefaults()
			topic, why := c.target(&tt.d)
			if topic != tt.wantTopic || why != tt.wantWhy {
				t.Errorf("target = %q, %q; want %q, %q", topic, why, tt.wantTopic, tt.wantWhy)
			}
		})
	}
}

func TestCopyMessage(t *testing.T) {
	for _, tt := range []struct {
		name        string
		d           deadLetter
		wantHeaders []string
	}{
		{"dead-letter headers stripped, the event's kept in order, repeated keys too", letter("handler-error"),
			[]string{"trace=t1", "x=1", "x=2", "dlq-redriven-from=g-dlq/0/7"}},
		{"an earlier re-drive's header replaced", letter("handler-error", HeaderRedrivenFrom, "g-dlq/0/1"),
			[]string{"trace=t1", "x=1", "x=2", "dlq-redriven-from=g-dlq/0/7"}},
		{"no headers of its own", parseDeadLetter("g-dlq", 3, 9, t0, &sarama.Record{Value: []byte("v"),
			Headers: hdr(dedup.HeaderDLQReason, "not-json", dedup.HeaderDLQError, "e")}),
			[]string{"dlq-redriven-from=g-dlq/3/9"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := copyMessage(&tt.d, "orders", 2)
			var got []string
			for _, h := range m.Headers {
				got = append(got, string(h.Key)+"="+string(h.Value))
			}
			if strings.Join(got, " ") != strings.Join(tt.wantHeaders, " ") {
				t.Errorf("headers %v, want %v", got, tt.wantHeaders)
			}
			if m.Topic != "orders" || m.Partition != 2 || !m.Timestamp.Equal(t0) {
				t.Errorf("message to %s/%d at %v", m.Topic, m.Partition, m.Timestamp)
			}
			v, _ := m.Value.Encode()
			if !bytes.Equal(v, tt.d.value) {
				t.Errorf("value %q, want %q", v, tt.d.value)
			}
			if tt.d.key == nil {
				if m.Key != nil {
					t.Error("a null key became a key")
				}
			} else if k, _ := m.Key.Encode(); !bytes.Equal(k, tt.d.key) {
				t.Errorf("key %q, want %q", k, tt.d.key)
			}
		})
	}
	null := parseDeadLetter("g-dlq", 0, 0, t0, &sarama.Record{Headers: hdr(dedup.HeaderDLQReason, "null-value")})
	if m := copyMessage(&null, "orders", 0); m.Value != nil || m.Key != nil {
		t.Error("a null value or key is not kept null")
	}
}

func TestPartitionFor(t *testing.T) {
	d := letter("handler-error") // from partition 2
	for _, tt := range []struct {
		name       string
		partitions int32
		srcPart    int32
		hash       bool
	}{
		{"the original partition", 3, 2, false},
		{"the original partition, more partitions now", 12, 2, false},
		{"fewer partitions now: by key", 2, 2, true},
		{"no source partition: by key", 3, -1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d.srcPart = tt.srcPart
			got, err := partitionFor(&d, "orders", tt.partitions)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.srcPart
			if tt.hash {
				want, _ = sarama.NewHashPartitioner("orders").Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(d.key)}, tt.partitions)
			}
			if got != want {
				t.Errorf("partition %d, want %d", got, want)
			}
		})
	}
}

func TestMarks(t *testing.T) {
	d := letter("handler-error")
	if pos, ok := parseMarkKey(markKey(d.pos)); !ok || pos.Topic != "g-dlq" || pos.Partition != 0 || pos.Offset != 7 {
		t.Fatalf("mark key %q read back as %+v, %v", markKey(d.pos), pos, ok)
	}
	for _, k := range []string{"g-dlq/0", "g-dlq/x/1", "a/b/0/1"} {
		if _, ok := parseMarkKey(k); ok {
			t.Errorf("%q read as a mark key", k)
		}
	}
	m := mark{Source: sourceOf(&d), Time: d.pos.Timestamp.UnixMilli()}
	if !m.of(&d) {
		t.Error("a mark does not match its own dead letter")
	}
	// The same offset of a dead-letter topic created again holds another
	// dead letter: the mark is not its.
	other := letter("handler-error", dedup.HeaderDLQOffset, "42")
	later := letter("handler-error")
	later.pos.Timestamp = t0.Add(time.Second)
	if m.of(&other) || m.of(&later) {
		t.Error("a mark matches another dead letter at the same offset")
	}
}
