package kafkautil

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestFetchedUpToIsWhereReadingEnds checks the offset ReadCommittedTimed
// prefetches from against where readBlock stops reading the same response:
// a prefetch from anywhere else would be dropped (harmless, but a wasted
// fetch for every response).
func TestFetchedUpToIsWhereReadingEnds(t *testing.T) {
	data := func(first int64, deltas ...int64) *sarama.RecordBatch {
		b := &sarama.RecordBatch{FirstOffset: first, LastOffsetDelta: int32(deltas[len(deltas)-1])}
		for _, d := range deltas {
			b.Records = append(b.Records, &sarama.Record{OffsetDelta: d, Key: []byte("k"), Value: []byte("v")})
		}
		return b
	}
	txn := func(b *sarama.RecordBatch, pid int64) *sarama.RecordBatch {
		b.IsTransactional, b.ProducerID = true, pid
		return b
	}
	marker := func(at int64, pid int64, commit bool) *sarama.RecordBatch {
		kind := byte(0)
		if commit {
			kind = 1
		}
		return &sarama.RecordBatch{FirstOffset: at, Control: true, IsTransactional: true, ProducerID: pid,
			Records: []*sarama.Record{{Key: []byte{0, 0, 0, kind}}}}
	}
	partial := func(first int64) *sarama.RecordBatch {
		return &sarama.RecordBatch{FirstOffset: first, LastOffsetDelta: 9, PartialTrailingRecord: true}
	}
	tests := []struct {
		name    string
		batches []*sarama.RecordBatch
		aborted []*sarama.AbortedTransaction
		next    int64
		want    int64
	}{
		{"nothing came back", nil, nil, 7, 7},
		{"whole batches", []*sarama.RecordBatch{data(10, 0, 1, 2), data(13, 0, 1)}, nil, 10, 15},
		{"from the middle of a batch", []*sarama.RecordBatch{data(10, 0, 1, 2), data(13, 0, 1)}, nil, 12, 15},
		{"batches already read", []*sarama.RecordBatch{data(10, 0, 1, 2)}, nil, 20, 20},
		{"compaction left gaps", []*sarama.RecordBatch{data(10, 0, 4, 9)}, nil, 10, 20},
		{"a partial batch at the end", []*sarama.RecordBatch{data(10, 0, 1), partial(12)}, nil, 10, 12},
		{"only a partial batch", []*sarama.RecordBatch{partial(12)}, nil, 12, 12},
		{"a commit marker last", []*sarama.RecordBatch{txn(data(10, 0, 1), 5), marker(12, 5, true)}, nil, 10, 13},
		{"an aborted transaction", []*sarama.RecordBatch{txn(data(10, 0, 1), 5), marker(12, 5, false), data(13, 0)},
			[]*sarama.AbortedTransaction{{ProducerID: 5, FirstOffset: 10}}, 10, 14},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			block := &sarama.FetchResponseBlock{AbortedTransactions: tt.aborted}
			for _, b := range tt.batches {
				block.RecordsSet = append(block.RecordsSet, &sarama.Records{RecordBatch: b})
			}
			if got := fetchedUpTo(block, tt.next); got != tt.want {
				t.Fatalf("fetchedUpTo = %d, want %d", got, tt.want)
			}
			read, err := readBlock(block, tt.next, 1<<62, func(int64, time.Time, *sarama.Record) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if read != tt.want {
				t.Fatalf("readBlock ends at %d, want %d", read, tt.want)
			}
		})
	}
}
