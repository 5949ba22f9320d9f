package kafkautil

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/IBM/sarama"
)

// Bounds returns a partition's log start offset and its last stable offset
// (ListOffsets with isolation read_committed). A read_committed reader is
// caught up at the LSO; "high water mark - 1" may be a transaction marker that
// is never delivered, so waiting for it hangs.
func Bounds(client sarama.Client, topic string, partition int32) (start, lso int64, err error) {
	// A leader moved by a broker restart answers NOT_LEADER until the
	// client's metadata is refreshed; retry a few times after a refresh.
	for attempt := 0; ; attempt++ {
		start, lso, err = bounds(client, topic, partition)
		if err == nil || attempt == 5 {
			return start, lso, err
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
		_ = client.RefreshMetadata(topic)
	}
}

func bounds(client sarama.Client, topic string, partition int32) (start, lso int64, err error) {
	leader, err := client.Leader(topic, partition)
	if err != nil {
		return 0, 0, fmt.Errorf("leader of %s/%d: %w", topic, partition, err)
	}
	ask := func(at int64) (int64, error) {
		req := &sarama.OffsetRequest{Version: 4, IsolationLevel: sarama.ReadCommitted}
		req.AddBlock(topic, partition, at, 1)
		resp, err := leader.GetAvailableOffsets(req)
		if err != nil {
			return 0, err
		}
		b := resp.GetBlock(topic, partition)
		if b == nil {
			return 0, fmt.Errorf("no offset block for %s/%d", topic, partition)
		}
		if b.Err != sarama.ErrNoError {
			return 0, b.Err
		}
		return b.Offset, nil
	}
	if start, err = ask(sarama.OffsetOldest); err != nil {
		return 0, 0, fmt.Errorf("log start of %s/%d: %w", topic, partition, err)
	}
	if lso, err = ask(sarama.OffsetNewest); err != nil {
		return 0, 0, fmt.Errorf("last stable offset of %s/%d: %w", topic, partition, err)
	}
	return start, lso, nil
}

// readFetchBytes is how much of the partition one fetch of ReadCommitted
// asks for (a larger first batch still comes whole, KIP-74). sarama decodes
// a whole response into records before fn sees the first, so this, twice
// (the response being read and the one fetched ahead), is what a restore
// holds at once: larger fetches raise a restore's peak memory without
// making it faster.
const readFetchBytes = 1 << 20

// ReadCommitted calls fn for every committed record of topic/partition with
// an offset in [from, to), skipping control batches and the records of
// aborted transactions, and returns the offset after the last batch read.
// It uses raw Fetch requests because sarama's PartitionConsumer neither
// delivers the commit marker at LSO-1 nor exposes its position.
func ReadCommitted(ctx context.Context, client sarama.Client, topic string, partition int32, from, to int64,
	fn func(offset int64, rec *sarama.Record) error) (int64, error) {
	return ReadCommittedTimed(ctx, client, topic, partition, from, to,
		func(offset int64, _ time.Time, rec *sarama.Record) error { return fn(offset, rec) })
}

// ReadCommittedTimed is ReadCommitted that also hands fn each record's
// timestamp, which sarama keeps as a delta from its batch's.
//
// While fn goes through one fetch's records, the next fetch is already on its
// way: from the offset after the response's last whole batch, which is where
// reading it ends unless fn fails. A restore then waits for the broker only
// when applying its records is faster than the broker sends them. A prefetch
// whose offset turns out wrong is dropped, and it never goes past to.
func ReadCommittedTimed(ctx context.Context, client sarama.Client, topic string, partition int32, from, to int64,
	fn func(offset int64, ts time.Time, rec *sarama.Record) error) (int64, error) {
	next := from
	lastProgress := time.Now()
	var ahead *prefetch
	defer func() { ahead.drop() }()
	for next < to {
		if err := ctx.Err(); err != nil {
			return next, err
		}
		var block *sarama.FetchResponseBlock
		var err error
		if ahead != nil && ahead.at == next {
			block, err = ahead.wait()
		} else {
			ahead.drop()
			block, err = fetchCommitted(client, topic, partition, next)
		}
		ahead = nil
		if err != nil {
			return next, err
		}
		if block.Err != sarama.ErrNoError {
			if block.Err == sarama.ErrNotLeaderForPartition || block.Err == sarama.ErrLeaderNotAvailable {
				_ = client.RefreshMetadata(topic)
				continue
			}
			return next, fmt.Errorf("fetch %s/%d at %d: %w", topic, partition, next, block.Err)
		}
		if after := fetchedUpTo(block, next); after > next && after < to {
			ahead = startPrefetch(client, topic, partition, after)
		}
		before := next
		if next, err = readBlock(block, next, to, fn); err != nil {
			return next, err
		}
		if next != before {
			lastProgress = time.Now()
			continue
		}
		// No batch came back although the partition is stable past next:
		// what lies in [next, to) are record batches that compaction
		// emptied, which sarama's decoder drops. Nothing is left to read.
		if len(block.RecordsSet) == 0 && !block.Partial && block.LastStableOffset >= to {
			return to, nil
		}
		// Otherwise a transaction is still open below to; the broker waited
		// MaxWaitTime before answering.
		if time.Since(lastProgress) > time.Minute {
			return next, fmt.Errorf("fetch %s/%d: no progress at offset %d (target %d, LSO %d) for a minute", topic, partition, next, to, block.LastStableOffset)
		}
	}
	return next, nil
}

// fetchCommitted fetches up to readFetchBytes of topic/partition from
// offset at, read_committed, from the partition's leader.
func fetchCommitted(client sarama.Client, topic string, partition int32, at int64) (*sarama.FetchResponseBlock, error) {
	leader, err := client.Leader(topic, partition)
	if err != nil {
		return nil, fmt.Errorf("leader of %s/%d: %w", topic, partition, err)
	}
	req := &sarama.FetchRequest{Version: 10, MaxWaitTime: 500, MinBytes: 1, MaxBytes: 32 << 20,
		Isolation: sarama.ReadCommitted, SessionEpoch: -1}
	req.AddBlock(topic, partition, at, readFetchBytes, -1)
	resp, err := leader.Fetch(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s/%d at %d: %w", topic, partition, at, err)
	}
	block := resp.GetBlock(topic, partition)
	if block == nil {
		return nil, fmt.Errorf("fetch %s/%d: no block in response", topic, partition)
	}
	return block, nil
}

// A prefetch is one fetch running in its own goroutine, which the reader
// that started it owns: it waits for the answer, or drops it, which also
// waits, so no fetch outlives ReadCommittedTimed.
type prefetch struct {
	at    int64
	done  chan struct{}
	block *sarama.FetchResponseBlock
	err   error
}

func startPrefetch(client sarama.Client, topic string, partition int32, at int64) *prefetch {
	f := &prefetch{at: at, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		f.block, f.err = fetchCommitted(client, topic, partition, at)
	}()
	return f
}

func (f *prefetch) wait() (*sarama.FetchResponseBlock, error) {
	<-f.done
	return f.block, f.err
}

// drop waits for the fetch to end and forgets its answer; nil does nothing.
func (f *prefetch) drop() {
	if f != nil {
		<-f.done
	}
}

// fetchedUpTo is the offset after the last whole batch of block at or past
// next: where reading block from next ends when fn does not fail (readBlock
// stops there too). next when there is none.
func fetchedUpTo(block *sarama.FetchResponseBlock, next int64) int64 {
	for _, recs := range block.RecordsSet {
		batch := recs.RecordBatch
		if batch == nil || batch.PartialTrailingRecord {
			break
		}
		if last := batch.FirstOffset + int64(batch.LastOffsetDelta); last >= next {
			next = last + 1
		}
	}
	return next
}

func readBlock(block *sarama.FetchResponseBlock, next, to int64, fn func(int64, time.Time, *sarama.Record) error) (int64, error) {
	aborted := append([]*sarama.AbortedTransaction(nil), block.AbortedTransactions...)
	sort.Slice(aborted, func(i, j int) bool { return aborted[i].FirstOffset < aborted[j].FirstOffset })
	abortedPIDs := map[int64]bool{}
	for _, recs := range block.RecordsSet {
		batch := recs.RecordBatch
		if batch == nil {
			return next, fmt.Errorf("legacy message format is not supported (Kafka 0.11+ record batches only)")
		}
		if batch.PartialTrailingRecord && len(batch.Records) == 0 {
			break
		}
		last := batch.FirstOffset + int64(batch.LastOffsetDelta)
		for len(aborted) > 0 && aborted[0].FirstOffset <= last {
			abortedPIDs[aborted[0].ProducerID] = true
			aborted = aborted[1:]
		}
		if last < next {
			continue
		}
		if batch.Control {
			if abortedPIDs[batch.ProducerID] && isAbortMarker(batch) {
				delete(abortedPIDs, batch.ProducerID)
			}
			next = last + 1
			continue
		}
		if batch.IsTransactional && abortedPIDs[batch.ProducerID] {
			next = last + 1
			continue
		}
		for _, rec := range batch.Records {
			off := batch.FirstOffset + rec.OffsetDelta
			if off < next {
				continue
			}
			if off >= to {
				return next, nil
			}
			if err := fn(off, recordTime(batch, rec), rec); err != nil {
				return next, err
			}
			next = off + 1
		}
		if !batch.PartialTrailingRecord {
			next = max(next, min(last+1, to))
		}
	}
	return next, nil
}

// isAbortMarker reads a control record's key: int16 version, int16 type
// (0 abort, 1 commit).
func isAbortMarker(batch *sarama.RecordBatch) bool {
	if len(batch.Records) == 0 || len(batch.Records[0].Key) < 4 {
		return false
	}
	return binary.BigEndian.Uint16(batch.Records[0].Key[2:4]) == 0
}

// recordTime is a record's timestamp: the batch's first plus the record's
// delta, or the batch's max timestamp when the broker set it
// (message.timestamp.type=LogAppendTime).
func recordTime(batch *sarama.RecordBatch, rec *sarama.Record) time.Time {
	if batch.LogAppendTime {
		return batch.MaxTimestamp
	}
	return batch.FirstTimestamp.Add(rec.TimestampDelta)
}
