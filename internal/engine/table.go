package engine

import (
	"fmt"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/wire"
)

// verdict is the outcome of looking an event up in the table.
type verdict int

const (
	// first: never seen (or not within the retention): process it.
	first verdict = iota
	// duplicate: seen and not expired: skip it.
	duplicate
	// expired: seen, but the record is past its expiry: process it again.
	expired
	// tooOld: not in the table, but the event is older than the retention, so
	// its record could have expired: the table cannot judge it.
	tooOld
)

func (v verdict) String() string {
	switch v {
	case first:
		return "first"
	case duplicate:
		return "duplicate"
	case expired:
		return "expired"
	case tooOld:
		return "too-old"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// DedupKey returns the dedup key of an event. In event-id mode with
// CloudEvents headers the key is ce_source and ce_id joined by a NUL byte,
// which the decoder refuses in ce_source, so distinct pairs never collide.
func DedupKey(kt dedup.KeyType, ev *wire.Event) (string, error) {
	if kt == dedup.KeyAggregateID {
		if ev.AggregateID == "" {
			return "", dedup.ErrNoAggregateID
		}
		return ev.AggregateID, nil
	}
	if ev.Source != "" {
		return ev.Source + "\x00" + ev.EventID, nil
	}
	return ev.EventID, nil
}

// eventTime is the time an event happened: its occurredAt, else the record
// timestamp.
func eventTime(ev *wire.Event, pos dedup.Position) time.Time {
	if !ev.OccurredAt.IsZero() {
		return ev.OccurredAt
	}
	return pos.Timestamp
}

// verdictOf decides what to do with an event given the table's record for its
// key (nil when there is none).
func verdictOf(t *dedup.Topology, existing *codecs.SeenRecord, eventTime, now time.Time) verdict {
	if existing != nil {
		if existing.Expired(now) {
			return expired
		}
		return duplicate
	}
	if !eventTime.IsZero() && eventTime.Before(now.Add(-t.Retention)) {
		return tooOld
	}
	return first
}

// seenRecord builds the seen record to store after the handler succeeded.
func seenRecord(t *dedup.Topology, ev *wire.Event, pos dedup.Position, now time.Time) *codecs.SeenRecord {
	return &codecs.SeenRecord{
		FirstProcessed: now,
		EventTime:      eventTime(ev, pos),
		AggregateID:    ev.AggregateID,
		Topic:          pos.Topic,
		Partition:      pos.Partition,
		Offset:         pos.Offset,
		ExpiresAt:      now.Add(t.Retention),
	}
}

// wireSource is where the decoder finds the ID (an IDSource's Func is the
// engine's to call).
func wireSource(s dedup.IDSource) wire.IDSource {
	return wire.IDSource{Field: s.Field, Header: s.Header, SourceHeader: s.SourceHeader, Key: s.Key}
}
