package processor

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// A restore applies the changelog to LevelDB in batches of at most
// restoreChunk records and restoreChunkBytes of keys and values: a batch
// larger than the memtable would take goleveldb's "large batch" path, which
// writes tables directly. A restore of more than restoreChunk records runs
// with restoreWriteBuffer memtables.
const (
	restoreChunk      = 10000
	restoreChunkBytes = restoreWriteBuffer / 4
)

// reportTable tells the hooks a partition's table size and key filter memory.
func (m *member) reportTable(p int32, s *store) {
	m.hooks.TableSize(p, s.entries)
	m.hooks.KeyFilterBytes(p, s.keyFilterBytes())
}

// restore brings a partition's store up to the changelog's last stable
// offset, reading read_committed from the offset the store recorded. A stored
// offset outside the log (below its start after deletion, or above its end
// after the topic was recreated) means the store cannot be trusted: wipe it
// and restore from the start.
func (m *member) restore(ctx context.Context, p int32, s *store) (int64, error) {
	topic := m.topo.TableTopic()
	logStart, err := m.client.GetOffset(topic, p, sarama.OffsetOldest)
	if err != nil {
		return 0, fmt.Errorf("log start of %s/%d: %w", topic, p, err)
	}
	// Restore up to the log end (high-water mark), not the LSO: a dead
	// instance's open transaction can pin the LSO below seen records that
	// other members committed after it; stopping there (or judging the
	// stored offset against it) would lose them. ReadCommitted waits until
	// the open transaction is decided (at most the transaction timeout).
	logEnd, err := m.client.GetOffset(topic, p, sarama.OffsetNewest)
	if err != nil {
		return 0, fmt.Errorf("end offset of %s/%d: %w", topic, p, err)
	}
	from, err := s.ChangelogNext()
	if err != nil {
		return 0, err
	}
	if from < 0 {
		from = logStart
	}
	if from < logStart || from > logEnd {
		m.log.Warn("table store out of range of the changelog, restoring from the start",
			"partition", p, "stored", from, "logStart", logStart, "logEnd", logEnd)
		if err := s.Wipe(); err != nil {
			return 0, err
		}
		from = logStart
	}
	total := logEnd - from
	if total <= 0 {
		m.hooks.RestoreProgress(p, 0, 0)
		m.reportTable(p, s)
		return 0, nil
	}
	start := time.Now()
	m.log.Info("restoring table partition", "partition", p, "from", from, "to", logEnd, "records", total)
	n, err := m.readChangelog(ctx, p, s, from, logEnd, func(chunk, left int64) { m.hooks.RestoreProgress(p, chunk, left) })
	if err != nil {
		return n, err
	}
	m.reportTable(p, s)
	d := time.Since(start)
	m.log.Info("restored table partition", "partition", p, "records", n, "entries", s.entries,
		"took", d.Round(time.Millisecond), "perSecond", int(float64(n)/max(d.Seconds(), 1e-9)))
	return n, nil
}

// readChangelog applies partition p's committed changelog records in
// [from, to) to s (applyChangelog).
func (m *member) readChangelog(ctx context.Context, p int32, s *store, from, to int64, chunkDone func(chunk, left int64)) (int64, error) {
	return applyChangelog(s, from, to, chunkDone, func(fn func(int64, *sarama.Record) error) (int64, error) {
		next, err := kafkautil.ReadCommitted(ctx, m.client, m.tableTopic, p, from, to, fn)
		if err != nil {
			err = fmt.Errorf("restore %s/%d: %w", m.tableTopic, p, err)
		}
		return next, err
	})
}

// applyChangelog applies the changelog records that read hands its
// callback, those of [from, to), to s in chunks of restoreChunk records at
// most, and records the offset reached with each; read returns the offset
// after the last record it read. chunkDone, when not nil, hears of each
// chunk and of the records left. The memtables grow for a long read and
// shrink back after it. It returns how many records it applied.
func applyChangelog(s *store, from, to int64, chunkDone func(chunk, left int64), read func(fn func(int64, *sarama.Record) error) (int64, error)) (int64, error) {
	total := to - from
	if total > restoreChunk {
		if err := s.reopen(restoreWriteBuffer); err != nil {
			return 0, err
		}
	}
	if err := s.reserveKeys(total); err != nil {
		return 0, err
	}
	var n, chunk, chunkBytes int64
	next, err := read(func(off int64, rec *sarama.Record) error {
		if rec.Value == nil {
			s.Delete(string(rec.Key))
		} else {
			s.Set(string(rec.Key), rec.Value)
		}
		n++
		chunk++
		if chunkBytes += int64(len(rec.Key) + len(rec.Value)); chunk == restoreChunk || chunkBytes >= restoreChunkBytes {
			if err := s.Apply(off + 1); err != nil {
				return err
			}
			if chunkDone != nil {
				chunkDone(chunk, to-off-1)
			}
			chunk, chunkBytes = 0, 0
		}
		return nil
	})
	if err != nil {
		s.Drop()
		return n, err
	}
	if err := s.Apply(next); err != nil {
		return n, err
	}
	if chunkDone != nil {
		chunkDone(chunk, 0)
	}
	return n, s.reopen(storeWriteBuffer)
}

// awaitRestore waits for the claim's restore (false: it failed, or the
// session ended) without holding up the other partitions. sarama's
// consumer fetches every partition a broker leads in one request and hands
// each partition its share before the next: a claim that does not take its
// messages holds that up for Consumer.MaxProcessingTime at a time. After a
// rebalance, the partitions that did not move, restored at once, stood
// still until the slowest moved partition was restored. So the partition
// is paused until its table is ready, and what was fetched before the
// pause is kept here (at most a fetch and sarama's channel buffer).
func (m *member) awaitRestore(claim sarama.ConsumerGroupClaim, r *partitionRestore, done <-chan struct{}) (early []*sarama.ConsumerMessage, ok bool) {
	select {
	case <-r.done:
		return nil, r.ok
	default:
	}
	tp := map[string][]int32{claim.Topic(): {claim.Partition()}}
	m.group.Pause(tp)
	defer m.group.Resume(tp)
	for {
		select {
		case <-r.done:
			return early, r.ok
		case <-done:
			return nil, false
		case msg, more := <-claim.Messages():
			if !more {
				return nil, false
			}
			early = append(early, msg)
		}
	}
}
