package redrive

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
)

// HeaderRedrivenFrom names the dead letter a re-driven record was copied
// from, as <dlq>/<partition>/<offset>.
const HeaderRedrivenFrom = "dlq-redriven-from"

// dlqHeaders are what a dead letter adds to the event's own headers, and
// what a re-drive adds: none of it belongs to the event.
var dlqHeaders = []string{
	dedup.HeaderDLQReason, dedup.HeaderDLQError, dedup.HeaderDLQGroup,
	dedup.HeaderDLQTopic, dedup.HeaderDLQPartition, dedup.HeaderDLQOffset,
	dedup.HeaderDLQOriginalSize, dedup.HeaderDLQOriginalSHA256, HeaderRedrivenFrom,
}

// Why a dead letter that passed the filters is not re-driven; the keys of
// Report.NotRedrivable.
const (
	WhyNotDeadLetter = "no dlq-reason header: not a dead letter"
	WhyCut           = "value cut to fit the dead-letter topic (dlq-original-size): it is not the event"
	WhyBadLoop       = "bad-loop-record: its key and headers are the loop record's, not the event's"
	WhyNoSource      = "no dlq-source-topic, and no target given"
	WhyInternal      = "the target is the dead-letter, state, loop or table topic"
	WhyNoTopic       = "the target topic does not exist"
)

// Filter names, the keys of Report.Skipped.
const (
	FilterGroup  = "group"
	FilterReason = "reason"
	FilterTime   = "time"
)

// deadLetter is one record of the dead-letter topic, with its dead-letter
// headers read.
type deadLetter struct {
	pos        dedup.Position // in the dead-letter topic
	key, value []byte
	headers    []*sarama.RecordHeader
	reason     string
	hasReason  bool
	group      string
	srcTopic   string
	srcPart    int32 // -1: absent or not a number
	srcOffset  int64 // -1: absent or not a number
	cut        bool
	again      bool // the event was a re-driven copy: it failed again
}

func parseDeadLetter(topic string, partition int32, offset int64, ts time.Time, rec *sarama.Record) deadLetter {
	d := deadLetter{pos: dedup.Position{Topic: topic, Partition: partition, Offset: offset, Timestamp: ts},
		key: rec.Key, value: rec.Value, headers: rec.Headers, srcPart: -1, srcOffset: -1}
	for _, h := range rec.Headers { // the last one wins, as dedup.Headers.Get
		v := string(h.Value)
		switch string(h.Key) {
		case dedup.HeaderDLQReason:
			d.reason, d.hasReason = v, true
		case dedup.HeaderDLQGroup:
			d.group = v
		case dedup.HeaderDLQTopic:
			d.srcTopic = v
		case dedup.HeaderDLQPartition:
			if p, err := strconv.ParseInt(v, 10, 32); err == nil && p >= 0 {
				d.srcPart = int32(p)
			} else {
				d.srcPart = -1
			}
		case dedup.HeaderDLQOffset:
			if o, err := strconv.ParseInt(v, 10, 64); err == nil && o >= 0 {
				d.srcOffset = o
			} else {
				d.srcOffset = -1
			}
		case dedup.HeaderDLQOriginalSize:
			d.cut = true
		case HeaderRedrivenFrom:
			d.again = true
		}
	}
	return d
}

// filter names the first filter d does not pass, "" when it passes them
// all. A dead letter without dlq-group is not another group's.
func (c *Config) filter(d *deadLetter) string {
	switch {
	case d.group != "" && d.group != c.Group:
		return FilterGroup
	case len(c.Reasons) > 0 && !slices.Contains(c.Reasons, d.reason):
		return FilterReason
	case !c.From.IsZero() && d.pos.Timestamp.Before(c.From),
		!c.To.IsZero() && !d.pos.Timestamp.Before(c.To):
		return FilterTime
	}
	return ""
}

// target is the topic d goes to, or why it cannot go anywhere.
func (c *Config) target(d *deadLetter) (topic, why string) {
	switch {
	case !d.hasReason:
		return "", WhyNotDeadLetter
	case d.cut:
		return "", WhyCut
	case d.reason == dedup.ReasonBadLoopRecord:
		return "", WhyBadLoop
	}
	topic = c.Target
	if topic == "" {
		topic = d.srcTopic
	}
	if topic == "" {
		return "", WhyNoSource
	}
	forbidden := []string{c.DLQ, c.StateTopic, c.Group + "-loop", c.Group + "-table"}
	if d.group != "" {
		forbidden = append(forbidden, d.group+"-loop", d.group+"-table")
	}
	if slices.Contains(forbidden, topic) {
		return "", WhyInternal
	}
	return topic, ""
}

// copyHeaders is the event's own headers in their order, without the
// dead-letter ones, and where the copy comes from.
func copyHeaders(d *deadLetter) []sarama.RecordHeader {
	out := make([]sarama.RecordHeader, 0, len(d.headers)+1)
	for _, h := range d.headers {
		if !slices.Contains(dlqHeaders, string(h.Key)) {
			out = append(out, *h)
		}
	}
	return append(out, sarama.RecordHeader{Key: []byte(HeaderRedrivenFrom), Value: []byte(markKey(d.pos))})
}

// partitionFor is the partition the copy goes to: the one the event was
// first read from when the target has it, else its key's hash partition.
func partitionFor(d *deadLetter, topic string, partitions int32) (int32, error) {
	if d.srcPart >= 0 && d.srcPart < partitions {
		return d.srcPart, nil
	}
	var key sarama.Encoder
	if d.key != nil {
		key = sarama.ByteEncoder(d.key)
	}
	return sarama.NewHashPartitioner(topic).Partition(&sarama.ProducerMessage{Topic: topic, Key: key}, partitions)
}

// copyMessage is the record a re-drive writes for d.
func copyMessage(d *deadLetter, topic string, partition int32) *sarama.ProducerMessage {
	m := &sarama.ProducerMessage{Topic: topic, Partition: partition, Headers: copyHeaders(d), Timestamp: d.pos.Timestamp}
	if d.key != nil {
		m.Key = sarama.ByteEncoder(d.key)
	}
	if d.value != nil { // a null value stays null
		m.Value = sarama.ByteEncoder(d.value)
	}
	return m
}

// markKey names a dead letter in the state topic and in HeaderRedrivenFrom.
func markKey(p dedup.Position) string {
	return fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, p.Offset)
}

// parseMarkKey reads markKey back; topic names cannot hold a slash.
func parseMarkKey(k string) (dedup.Position, bool) {
	parts := strings.Split(k, "/")
	if len(parts) != 3 {
		return dedup.Position{}, false
	}
	p, err1 := strconv.ParseInt(parts[1], 10, 32)
	o, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return dedup.Position{}, false
	}
	return dedup.Position{Topic: parts[0], Partition: int32(p), Offset: o}, true
}

// mark is the state topic's record of one re-driven dead letter. Source and
// Time tell the dead letter from another at the same offset of a
// dead-letter topic deleted and created again.
type mark struct {
	Source string `json:"source"` // dlq-source-topic/partition/offset
	Time   int64  `json:"time"`   // the dead letter's timestamp, Unix ms
	Copy   string `json:"copy"`   // where the copy went: topic/partition/offset
	Reason string `json:"reason"`
	At     string `json:"at"` // when, RFC 3339
}

func sourceOf(d *deadLetter) string {
	return fmt.Sprintf("%s/%d/%d", d.srcTopic, d.srcPart, d.srcOffset)
}

func (m mark) of(d *deadLetter) bool {
	return m.Source == sourceOf(d) && m.Time == d.pos.Timestamp.UnixMilli()
}

func (m mark) encode() []byte {
	b, _ := json.Marshal(m) // strings and an int: cannot fail
	return b
}
