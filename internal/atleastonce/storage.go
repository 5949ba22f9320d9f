package atleastonce

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/lovoo/goka/storage"
	"github.com/syndtr/goleveldb/leveldb"

	"github.com/dedupkit/dedup/internal/leveldbx"
)

// goka keeps its changelog offset under this key in every partition's store.
const gokaOffsetKey = "__offset"

// countingStorage keeps the number of table entries of one partition so the
// table size can be exported without scanning LevelDB on every scrape. It
// counts once when the store is opened (a scan, paid at start only) and then
// on each Set of a new key and each Delete of an existing one.
type countingStorage struct {
	storage.Storage
	report func(n int64)
	closed func()
	n      int64
}

// countingBuilder is goka's storage.DefaultBuilder (LevelDB with default
// options under dir/<topic>.<partition>) with counting and one change: a
// store that LevelDB finds damaged while opening or counting it (a broken
// manifest or journal, a missing table file, a bad block) is deleted and
// opened empty, so goka restores it from the changelog instead of failing
// every start, as the exactly-once runtime does (processor/store_corrupt.go).
// report gets each partition's new size, closed its closing (goka closes a
// partition's storage when the partition is revoked).
func countingBuilder(dir string, log *slog.Logger, report func(topic string, partition int32, n int64),
	closed func(topic string, partition int32)) storage.Builder {
	return func(topic string, partition int32) (storage.Storage, error) {
		path := filepath.Join(dir, fmt.Sprintf("%s.%d", topic, partition))
		db, n, err := openCounted(path)
		if err != nil && leveldbx.Corrupted(err) {
			log.Error("table store damaged, deleted it to restore it from the changelog",
				"topic", topic, "partition", partition, "path", path, "err", err)
			if rmErr := os.RemoveAll(path); rmErr != nil {
				return nil, fmt.Errorf("delete damaged table store: %w", rmErr)
			}
			db, n, err = openCounted(path)
		}
		if err != nil {
			return nil, err
		}
		st, err := storage.New(db)
		if err != nil {
			db.Close()
			return nil, err
		}
		return &countingStorage{Storage: st, n: n,
			report: func(n int64) { report(topic, partition, n) },
			closed: func() { closed(topic, partition) }}, nil
	}
}

// openCounted opens the LevelDB at path and counts its table entries,
// reading every block once.
func openCounted(path string) (*leveldb.DB, int64, error) {
	db, err := leveldb.OpenFile(path, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("open table store %s: %w", path, err)
	}
	it := db.NewIterator(nil, nil)
	var n int64
	for it.Next() {
		if string(it.Key()) != gokaOffsetKey {
			n++
		}
	}
	it.Release()
	if err := it.Error(); err != nil {
		db.Close()
		return nil, 0, fmt.Errorf("read table store %s: %w", path, err)
	}
	return db, n, nil
}

func (s *countingStorage) Close() error {
	err := s.Storage.Close()
	s.closed()
	return err
}

func (s *countingStorage) Open() error {
	if err := s.Storage.Open(); err != nil {
		return err
	}
	s.report(s.n)
	return nil
}

func (s *countingStorage) Set(key string, value []byte) error {
	had, err := s.Storage.Has(key)
	if err != nil {
		return err
	}
	if err := s.Storage.Set(key, value); err != nil {
		return err
	}
	if !had {
		s.n++
		s.report(s.n)
	}
	return nil
}

func (s *countingStorage) Delete(key string) error {
	had, err := s.Storage.Has(key)
	if err != nil {
		return err
	}
	if err := s.Storage.Delete(key); err != nil {
		return err
	}
	if had {
		s.n--
		s.report(s.n)
	}
	return nil
}
