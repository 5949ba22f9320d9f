package engine

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/wire"
)

// Prepared is the part of processing a record that needs no table and no
// runtime: the loop header's source position, the envelope decode and the
// dedup key. The runtime hands it to ProcessRecord; it may prepare ahead, on
// the goroutine that consumed the record, so that the one goroutine that
// owns the table spends its time on the table (the exactly-once runtime
// does: the envelope decode was a tenth of its worker's CPU, all of it in
// that goroutine).
type Prepared struct {
	fromLoop bool
	// Where the event was first read (the loop's source for loop records),
	// and that record's key and headers. A loop record without its source
	// (dedup.ReasonBadLoopRecord) keeps its own headers, with no position
	// or key: it names no source the dead letter could claim.
	pos     dedup.Position
	recKey  string
	headers dedup.Headers
	event   *wire.Event
	key     string // the dedup key
	// reason and err say why the record goes to the dead-letter topic
	// instead; reason is "" for a record to judge.
	reason string
	err    error
}

// Prepare decodes rec for ProcessRecord. It reads only the topology's
// definition, so runtimes may call it from any goroutine, concurrently.
func Prepare(t *dedup.Topology, rec dedup.Record) *Prepared {
	p := &Prepared{
		fromLoop: isLoop(t, rec.Topic),
		pos:      dedup.Position{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp},
		recKey:   rec.Key,
		headers:  rec.Headers,
	}
	if p.fromLoop {
		var err error
		if p.pos, p.recKey, p.headers, err = loopSource(rec.Headers); err != nil {
			p.reason, p.err = dedup.ReasonBadLoopRecord, err
			return p
		}
		rec.Key, rec.Headers = p.recKey, p.headers
	}
	ev, err := decode(t, rec)
	if err != nil {
		p.reason, p.err = wire.Reason(err), err
		return p
	}
	key, err := DedupKey(t.KeyType, ev)
	if err != nil {
		p.reason, p.err = dedup.ReasonNoAggregateID, err
		return p
	}
	p.event, p.key = ev, key
	return p
}

// decode finds the event ID of rec where the topology's ID source says.
// JSON fields and headers are the codecs' Decoder; the record key and an
// IDFunc leave the body opaque, as header IDs do.
func decode(t *dedup.Topology, rec dedup.Record) (*wire.Event, error) {
	src := wireSource(t.EventID)
	switch {
	case t.EventID.Func != nil:
		id, err := t.EventID.Func(rec)
		if err != nil {
			return nil, &wire.DecodeError{Kind: wire.ErrNoID, Detail: fmt.Sprintf("IDFunc: %v", err)}
		}
		return opaqueEvent(id, rec.Value, "IDFunc's ID")
	case src.Key:
		return opaqueEvent(rec.Key, rec.Value, "record key")
	}
	var hm map[string][]byte
	if src.Header != "" {
		hm = make(map[string][]byte, len(rec.Headers))
		for _, h := range rec.Headers { // the last one wins, as dedup.Headers.Get
			if prev, ok := hm[h.Key]; ok && isIDHeader(src, h.Key) && !bytes.Equal(prev, h.Value) {
				return nil, &wire.DecodeError{Kind: wire.ErrDuplicateField,
					Detail: fmt.Sprintf("header %q occurs more than once with different values", h.Key)}
			}
			hm[h.Key] = h.Value
		}
	}
	return wire.Decoder{ID: src}.Decode(rec.Value, hm)
}

// isIDHeader says whether a header makes up the event's identity; a record
// that carries one twice with different values has no single identity.
func isIDHeader(src wire.IDSource, key string) bool {
	return key == src.Header || (src.SourceHeader != "" && key == src.SourceHeader)
}

// opaqueEvent is the event of a record whose body is not parsed.
func opaqueEvent(id string, value []byte, where string) (*wire.Event, error) {
	switch {
	case value == nil:
		return nil, &wire.DecodeError{Kind: wire.ErrNullValue, Detail: "record value is null (tombstone)"}
	case id == "":
		return nil, &wire.DecodeError{Kind: wire.ErrNoID, Detail: where + " is empty"}
	case len(id) > wire.MaxIDLength:
		return nil, &wire.DecodeError{Kind: wire.ErrIDTooLong, Detail: fmt.Sprintf("%s is %d bytes, at most %d allowed", where, len(id), wire.MaxIDLength)}
	case !utf8.ValidString(id):
		return nil, &wire.DecodeError{Kind: wire.ErrBadField, Detail: where + " is not valid UTF-8"}
	}
	return &wire.Event{EventID: id, Payload: value, Raw: value}, nil
}
