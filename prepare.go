package dedup

import (
	"time"

	"github.com/dedupkit/dedup/codecs"
)

// Record is what Prepare reads of one consumed record.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       string
	Headers   map[string][]byte
	Value     []byte
}

// Prepared is the part of processing a record that needs no table and no
// context: the loop header's source position, the envelope decode and the
// dedup key. Process does it first; a runtime can do it ahead, on the
// goroutine that consumed the record, and hand it over (PreparedContext), so
// the one goroutine that owns the table spends its time on the table. The
// envelope decode was a tenth of the exactly-once worker's CPU, all of it in
// that goroutine.
type Prepared struct {
	fromLoop bool
	pos      Position          // where the event was first read (the loop's source for loop records)
	recKey   string            // that record's key
	headers  map[string][]byte // that record's headers
	event    *codecs.Event
	key      string // the dedup key
	// reason and err say why the record goes to the dead-letter topic
	// instead; reason is "" for a record to judge.
	reason string
	err    error
}

// PreparedContext is a goka.Context whose runtime called Prepare for the
// record already; Prepared returns that result, nil when it did not.
type PreparedContext interface {
	Prepared() *Prepared
}

// Prepare decodes rec as Process would. It reads only the topology's
// configuration, so runtimes may call it from any goroutine, concurrently,
// once Graph has been called.
func (t *Topology) Prepare(rec Record) *Prepared {
	p := &Prepared{
		fromLoop: rec.Topic == t.loopTopic,
		pos:      Position{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp},
		recKey:   rec.Key,
		headers:  rec.Headers,
	}
	if p.fromLoop {
		var err error
		if p.pos, p.recKey, p.headers, err = loopSource(rec.Headers); err != nil {
			p.reason, p.err = ReasonBadLoopRecord, err
			return p
		}
	}
	ev, err := codecs.Decoder{ID: t.IDSource}.Decode(rec.Value, p.headers)
	if err != nil {
		p.reason, p.err = codecs.Reason(err), err
		return p
	}
	key, err := t.Table.Key(ev)
	if err != nil {
		p.reason, p.err = ReasonNoAggregateID, err
		return p
	}
	p.event, p.key = ev, key
	return p
}
