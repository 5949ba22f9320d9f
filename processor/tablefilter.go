package processor

import "github.com/syndtr/goleveldb/leveldb/filter"

// tableFilter is the bloom filter LevelDB writes into each table file, over
// the table records ('d' keys) only: those are what lookups search for, and
// bits spent on other keys would only raise its false-positive rate.
// Lookups of other keys (metadata) are always "may contain", so they read
// the table as without a filter.
//
// It has a name of its own because a filter's name is stored in each table,
// and a table whose filter has another name is read without one.
type tableFilter struct{ bloom filter.Filter }

func newTableFilter() tableFilter { return tableFilter{bloom: filter.NewBloomFilter(10)} }

func (tableFilter) Name() string { return "dedup.TableRecordBloom10" }

func (f tableFilter) Contains(data, key []byte) bool {
	if !isDataKey(key) {
		return true
	}
	return f.bloom.Contains(data, key)
}

func (f tableFilter) NewGenerator() filter.FilterGenerator {
	return tableFilterGenerator{f.bloom.NewGenerator()}
}

type tableFilterGenerator struct{ bloom filter.FilterGenerator }

func (g tableFilterGenerator) Add(key []byte) {
	if isDataKey(key) {
		g.bloom.Add(key)
	}
}

func (g tableFilterGenerator) Generate(b filter.Buffer) { g.bloom.Generate(b) }

func isDataKey(key []byte) bool { return len(key) > 0 && key[0] == prefixData }
