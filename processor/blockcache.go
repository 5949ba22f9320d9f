package processor

import (
	"sync"
	"unsafe"

	"github.com/syndtr/goleveldb/leveldb/cache"
)

// blockCache is one LRU budget for the LevelDB block caches of every
// partition store a Processor holds (Kafka Streams users know it as the
// shared RocksDB cache of "bounded memory"). goleveldb gives each DB a cache
// of its own, so memory would grow with the partitions an instance is
// assigned: 12 partitions at 4 MiB each held 48 MiB of blocks, most of them
// cold. With one budget, hot partitions get the room and the total is fixed.
//
// It is goleveldb's cache/lru.go with an owner per entry, so that a store
// evicting its own blocks (a removed table file, Close) leaves the other
// stores' blocks alone. goleveldb's cache.Cache keeps the key->node map per
// DB and only asks the Cacher which nodes to keep; each node's handle
// releases into its own DB's map, so sharing the ordering is safe.
type blockCache struct {
	mu       sync.Mutex
	capacity int
	used     int
	recent   blockCacheNode // sentinel of the ring; recent.next is the newest
}

type blockCacheNode struct {
	n     *cache.Node
	h     *cache.Handle
	owner *blockCacheShare
	ban   bool

	next, prev *blockCacheNode
}

func (n *blockCacheNode) insert(at *blockCacheNode) {
	x := at.next
	at.next = n
	n.prev = at
	n.next = x
	x.prev = n
}

func (n *blockCacheNode) remove() {
	n.prev.next = n.next
	n.next.prev = n.prev
	n.prev, n.next = nil, nil
}

func newBlockCache(capacity int) *blockCache {
	c := &blockCache{capacity: capacity}
	c.recent.next, c.recent.prev = &c.recent, &c.recent
	return c
}

// New gives one store its share (opt.Cacher); goleveldb's capacity option
// is ignored, the budget is the shared one.
func (c *blockCache) New(int) cache.Cacher { return &blockCacheShare{c: c} }

// Used is the bytes of blocks held over all stores.
func (c *blockCache) Used() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// evictWhere unlinks the entries for which match is true and returns them;
// their handles must be released without c.mu held.
func (c *blockCache) evictWhere(match func(*blockCacheNode) bool) []*blockCacheNode {
	var out []*blockCacheNode
	for e := c.recent.prev; e != &c.recent; {
		rn := e
		e = e.prev
		if match(rn) {
			rn.remove()
			rn.n.CacheData = nil
			c.used -= rn.n.Size()
			out = append(out, rn)
		}
	}
	return out
}

// shrink evicts the oldest entries until the budget holds.
func (c *blockCache) shrink() []*blockCacheNode {
	var out []*blockCacheNode
	for c.used > c.capacity {
		rn := c.recent.prev
		rn.remove()
		rn.n.CacheData = nil
		c.used -= rn.n.Size()
		out = append(out, rn)
	}
	return out
}

func release(nodes []*blockCacheNode) {
	for _, rn := range nodes {
		rn.h.Release()
	}
}

// blockCacheShare is one store's view of the shared budget (cache.Cacher).
type blockCacheShare struct{ c *blockCache }

func (s *blockCacheShare) Capacity() int {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.c.capacity
}

// SetCapacity resizes the shared budget; goleveldb calls it only through
// DB.SetBlockCacheCapacity, which this package does not use.
func (s *blockCacheShare) SetCapacity(capacity int) {
	s.c.mu.Lock()
	s.c.capacity = capacity
	evicted := s.c.shrink()
	s.c.mu.Unlock()
	release(evicted)
}

func (s *blockCacheShare) Promote(n *cache.Node) {
	c := s.c
	var evicted []*blockCacheNode
	c.mu.Lock()
	if n.CacheData == nil {
		if n.Size() <= c.capacity {
			rn := &blockCacheNode{n: n, h: n.GetHandle(), owner: s}
			rn.insert(&c.recent)
			n.CacheData = unsafe.Pointer(rn)
			c.used += n.Size()
			evicted = c.shrink()
		}
	} else if rn := (*blockCacheNode)(n.CacheData); !rn.ban {
		rn.remove()
		rn.insert(&c.recent)
	}
	c.mu.Unlock()
	release(evicted)
}

func (s *blockCacheShare) Ban(n *cache.Node) {
	c := s.c
	c.mu.Lock()
	if n.CacheData == nil {
		n.CacheData = unsafe.Pointer(&blockCacheNode{n: n, owner: s, ban: true})
		c.mu.Unlock()
		return
	}
	rn := (*blockCacheNode)(n.CacheData)
	if rn.ban {
		c.mu.Unlock()
		return
	}
	rn.remove()
	rn.ban = true
	c.used -= n.Size()
	h := rn.h
	rn.h = nil
	c.mu.Unlock()
	h.Release()
}

func (s *blockCacheShare) Evict(n *cache.Node) {
	c := s.c
	c.mu.Lock()
	rn := (*blockCacheNode)(n.CacheData)
	if rn == nil || rn.ban {
		c.mu.Unlock()
		return
	}
	rn.remove()
	n.CacheData = nil
	c.used -= n.Size()
	c.mu.Unlock()
	rn.h.Release()
}

// EvictNS drops this store's blocks of one table file (namespace = file
// number, which other stores reuse for their own files).
func (s *blockCacheShare) EvictNS(ns uint64) {
	s.c.mu.Lock()
	evicted := s.c.evictWhere(func(rn *blockCacheNode) bool { return rn.owner == s && rn.n.NS() == ns })
	s.c.mu.Unlock()
	release(evicted)
}

// EvictAll drops this store's blocks; goleveldb calls it when the DB closes.
func (s *blockCacheShare) EvictAll() {
	s.c.mu.Lock()
	evicted := s.c.evictWhere(func(rn *blockCacheNode) bool { return rn.owner == s })
	s.c.mu.Unlock()
	release(evicted)
}

func (s *blockCacheShare) Close() error { return nil }
