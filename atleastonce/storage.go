package atleastonce

import (
	"github.com/lovoo/goka/storage"
)

// goka keeps its changelog offset under this key in every partition's store.
const gokaOffsetKey = "__offset"

// countingStorage keeps the number of table entries of one partition so the
// table size can be exported without scanning LevelDB on every scrape. It
// counts once at Open (a scan, paid at start only) and then on each Set of a
// new key and each Delete of an existing one.
type countingStorage struct {
	storage.Storage
	report func(n int64)
	closed func()
	n      int64
}

// countingBuilder wraps a goka storage builder; report gets each partition's
// new size, closed its closing (goka closes a partition's storage when the
// partition is revoked).
func countingBuilder(inner storage.Builder, report func(topic string, partition int32, n int64),
	closed func(topic string, partition int32)) storage.Builder {
	return func(topic string, partition int32) (storage.Storage, error) {
		st, err := inner(topic, partition)
		if err != nil {
			return nil, err
		}
		return &countingStorage{Storage: st,
			report: func(n int64) { report(topic, partition, n) },
			closed: func() { closed(topic, partition) }}, nil
	}
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
	it, err := s.Storage.Iterator()
	if err != nil {
		return err
	}
	defer it.Release()
	for it.Next() {
		if string(it.Key()) != gokaOffsetKey {
			s.n++
		}
	}
	s.report(s.n)
	return it.Err()
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
