package processor

// A store holds at most one sealed transaction: the one whose Kafka commit
// runs while the loop processes the next (commit.go). Its overlay and its
// LevelDB reads are set aside by Seal; the loop's reads go through the open
// overlay, then the sealed one, then LevelDB. After Kafka committed, the
// commit's goroutine writes the sealed overlay to LevelDB (WriteSealed)
// while the loop goes on: it only reads the store meanwhile, and the keys
// the write changes are answered from the sealed overlay until the loop
// drops it (DoneSealed). So the transaction being processed never caches a
// LevelDB read that the write makes stale.

// Seal sets the overlay and its reads aside as the transaction being
// committed and starts empty ones for the next; false when there was
// nothing to seal.
func (s *store) Seal() bool {
	if len(s.writes.overlay) == 0 {
		return false
	}
	if s.writes.sealed != nil {
		panic("store: a sealed transaction is still pending")
	}
	s.writes.sealed, s.writes.sealedBase = s.writes.overlay, s.writes.base
	s.writes.overlay, s.writes.base = orNew(s.writes.spare), orNew(s.writes.spareBase)
	s.writes.spare, s.writes.spareBase = nil, nil
	return true
}

func orNew(m map[string][]byte) map[string][]byte {
	if m == nil {
		return map[string][]byte{}
	}
	return m
}

// HasSealed reports whether a sealed transaction is pending.
func (s *store) HasSealed() bool { return s.writes.sealed != nil }

// WriteSealed writes the sealed overlay and the changelog offset to LevelDB
// in one batch and returns the entry count's change for DoneSealed. Safe
// while the loop reads the store (see write).
func (s *store) WriteSealed(changelogNext int64) (int64, error) {
	return s.write(s.writes.sealed, s.writes.sealedBase, changelogNext)
}

// DoneSealed, on the loop after WriteSealed, drops the sealed transaction:
// LevelDB answers for it now.
func (s *store) DoneSealed(delta int64) {
	s.committed(s.writes.sealed, delta)
	s.dropSealed()
	s.maintainKeys()
}

// touched reports whether an uncommitted transaction wrote key.
func (s *store) touched(key string) bool {
	if _, ok := s.writes.overlay[key]; ok {
		return true
	}
	_, ok := s.writes.sealed[key]
	return ok
}

func (s *store) dropSealed() {
	if s.writes.sealed == nil {
		return
	}
	clear(s.writes.sealed)
	clear(s.writes.sealedBase)
	s.writes.spare, s.writes.spareBase, s.writes.sealed, s.writes.sealedBase = s.writes.sealed, s.writes.sealedBase, nil, nil
}
