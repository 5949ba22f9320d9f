package processor

import "github.com/syndtr/goleveldb/leveldb/cache"

// blockCache is one LRU budget for the LevelDB block caches of every
// partition store a Processor holds (Kafka Streams users know it as the
// shared RocksDB cache of "bounded memory"). goleveldb gives each DB a cache
// of its own, so memory would grow with the partitions an instance is
// assigned: 12 partitions at 4 MiB each held 48 MiB of blocks, most of them
// cold. With one budget, hot partitions get the room and the total is fixed.
//
// Sharing goleveldb's own LRU is safe: each DB keeps its key->block map
// (cache.Cache) and asks the Cacher only which blocks to keep; an evicted
// block's handle releases into its own DB's map, and a DB dropping its
// blocks (a removed table file, Close) walks its own map and evicts just
// those (TestBlockCacheEvictNSKeepsOtherStoresBlocks).
type blockCache struct{ lru cache.Cacher }

func newBlockCache(capacity int) *blockCache { return &blockCache{lru: cache.NewLRU(capacity)} }

// New gives a store the shared LRU (opt.Cacher); goleveldb's per-DB capacity
// option is ignored, the budget is the shared one.
func (c *blockCache) New(int) cache.Cacher { return c.lru }
