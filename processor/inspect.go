package processor

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// TablePath is where a partition of a table is stored under stateDir.
func TablePath(stateDir, tableTopic string, partition int32) string {
	return filepath.Join(stateDir, fmt.Sprintf("%s.%d", tableTopic, partition))
}

// ReadTable calls fn for every committed record of a partition's local
// table, opening LevelDB read-only. The worker must not hold it open (LevelDB
// allows one process at a time). For tools and tests.
func ReadTable(stateDir, tableTopic string, partition int32, fn func(key string, value []byte) error) error {
	db, err := openReadOnly(stateDir, tableTopic, partition)
	if err != nil {
		return err
	}
	defer db.Close()
	it := db.NewIterator(util.BytesPrefix([]byte{prefixData}), nil)
	defer it.Release()
	for it.Next() {
		if err := fn(string(it.Key()[1:]), it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

// Lookup is the answer to "have we seen this key?" from the tables this
// process holds. Only committed records are read.
type Lookup struct {
	Key       string
	Found     bool
	Partition int32   // where it was found
	Value     []byte  // the stored seen record
	Owned     []int32 // partitions this process holds (when not found)
}

// Lookup searches key in every partition this process holds. A key is
// stored in the partition its record was processed on, which for records
// keyed by their dedup key is the producer's choice, so every owned partition
// is asked (a LevelDB read each).
func (p *Processor) Lookup(key string) (Lookup, error) {
	res := Lookup{Key: key}
	for _, m := range p.members {
		m.tablesMu.RLock()
		for part, t := range m.tables {
			res.Owned = append(res.Owned, part)
			if res.Found {
				continue
			}
			v, err := t.store.db.Get(dataKey(key), nil)
			if err == nil {
				res.Found, res.Partition, res.Value = true, part, v
			} else if !errors.Is(err, leveldb.ErrNotFound) {
				m.tablesMu.RUnlock()
				return res, fmt.Errorf("partition %d: %w", part, err)
			}
		}
		m.tablesMu.RUnlock()
	}
	slices.Sort(res.Owned)
	return res, nil
}

// PartitionStats describes one partition's local table.
type PartitionStats struct {
	Partition     int32
	Entries       int64
	ChangelogNext int64 // -1: nothing stored yet
	NextExpiry    int64 // unix nanos of the earliest expiry, 0 if none
}

// TableStats reads the stats of every partition of tableTopic under
// stateDir (read-only; fails while a worker holds the table).
func TableStats(stateDir, tableTopic string) ([]PartitionStats, error) {
	parts, err := localPartitions(stateDir, tableTopic)
	if err != nil {
		return nil, err
	}
	var out []PartitionStats
	for _, p := range parts {
		db, err := openReadOnly(stateDir, tableTopic, p)
		if err != nil {
			return nil, err
		}
		s := &store{db: db, path: TablePath(stateDir, tableTopic, p)}
		st := PartitionStats{Partition: p}
		st.Entries, err = s.meta(metaEntries, 0)
		if err == nil {
			st.ChangelogNext, err = s.ChangelogNext()
		}
		if err == nil {
			st.NextExpiry, err = nextExpiry(db)
		}
		db.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// nextExpiry scans every record for the earliest expiry (0 if none): there
// is no expiry index, and inspecting is rare and offline.
func nextExpiry(db *leveldb.DB) (int64, error) {
	it := db.NewIterator(util.BytesPrefix([]byte{prefixData}), &opt.ReadOptions{DontFillCache: true})
	defer it.Release()
	var next int64
	for it.Next() {
		if exp := seenExpiry(it.Value()); exp > 0 && (next == 0 || exp < next) {
			next = exp
		}
	}
	return next, it.Error()
}

// GetLocal looks key up in every local partition of tableTopic (read-only).
func GetLocal(stateDir, tableTopic, key string) (Lookup, error) {
	res := Lookup{Key: key}
	parts, err := localPartitions(stateDir, tableTopic)
	if err != nil {
		return res, err
	}
	for _, p := range parts {
		db, err := openReadOnly(stateDir, tableTopic, p)
		if err != nil {
			return res, err
		}
		v, err := db.Get(dataKey(key), nil)
		db.Close()
		res.Owned = append(res.Owned, p)
		if err == nil {
			res.Found, res.Partition, res.Value = true, p, v
			return res, nil
		}
		if !errors.Is(err, leveldb.ErrNotFound) {
			return res, err
		}
	}
	return res, nil
}

// ErrTableLocked means a running worker holds the local table.
var ErrTableLocked = errors.New("a running worker holds this table; stop it, or ask its HTTP address: GET /v1/seen/{id}")

func openReadOnly(stateDir, tableTopic string, p int32) (*leveldb.DB, error) {
	db, err := leveldb.OpenFile(TablePath(stateDir, tableTopic, p), readOnlyOptions())
	if err != nil && strings.Contains(err.Error(), "resource temporarily unavailable") {
		return nil, fmt.Errorf("%s: %w", TablePath(stateDir, tableTopic, p), ErrTableLocked)
	}
	return db, err
}

// localPartitions lists the partitions of tableTopic stored under stateDir.
func localPartitions(stateDir, tableTopic string) ([]int32, error) {
	matches, err := filepath.Glob(filepath.Join(stateDir, tableTopic+".*"))
	if err != nil {
		return nil, err
	}
	var parts []int32
	for _, m := range matches {
		n, err := strconv.ParseInt(strings.TrimPrefix(filepath.Base(m), tableTopic+"."), 10, 32)
		if err == nil {
			parts = append(parts, int32(n))
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("no local table %s under %s", tableTopic, stateDir)
	}
	slices.Sort(parts)
	return parts, nil
}

func readOnlyOptions() *opt.Options {
	o := storeOptions(storeWriteBuffer)
	o.ReadOnly, o.ErrorIfMissing = true, true
	return o
}
