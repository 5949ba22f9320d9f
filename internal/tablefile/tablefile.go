// Package tablefile is the layout of a partition's dedup table in the
// state dir (a LevelDB per partition: records under 'd'+key, metadata under
// 'm:'+name) and the read-only access the CLI's table commands use while no
// worker holds the table, with the JSON answer of "was this ID seen".
package tablefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"

	"github.com/dedupkit/dedup/codecs"
)

// The key layout of a partition's LevelDB.
const (
	DataPrefix        = 'd'
	MetaChangelogNext = "m:changelog-next"
	MetaEntries       = "m:entries"
)

// Path is where a partition of a table is stored under stateDir.
func Path(stateDir, tableTopic string, partition int32) string {
	return filepath.Join(stateDir, fmt.Sprintf("%s.%d", tableTopic, partition))
}

// DataKey is the LevelDB key of a table record.
func DataKey(key string) []byte {
	b := make([]byte, 1+len(key))
	b[0] = DataPrefix
	copy(b[1:], key)
	return b
}

// Getter reads one LevelDB key (a *leveldb.DB, a snapshot).
type Getter interface {
	Get(key []byte, ro *opt.ReadOptions) ([]byte, error)
}

// Meta reads a metadata counter, def when it was never written.
func Meta(db Getter, name string, def int64) (int64, error) {
	v, err := db.Get([]byte(name), nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return def, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", name, err)
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("bad %s record", name)
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// Read calls fn for every committed record of a partition's local
// table, opening LevelDB read-only. The worker must not hold it open (LevelDB
// allows one process at a time). For tools and tests.
func Read(stateDir, tableTopic string, partition int32, fn func(key string, value []byte) error) error {
	db, err := openReadOnly(stateDir, tableTopic, partition)
	if err != nil {
		return err
	}
	defer db.Close()
	it := db.NewIterator(util.BytesPrefix([]byte{DataPrefix}), nil)
	defer it.Release()
	for it.Next() {
		if err := fn(string(it.Key()[1:]), it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

// Lookup is the answer to "have we seen this key?" from the tables a
// process holds. Only committed records are read.
type Lookup struct {
	Key       string
	Found     bool
	Partition int32   // where it was found
	Value     []byte  // the stored seen record
	Owned     []int32 // partitions held (when not found)
}

// PartitionStats describes one partition's local table.
type PartitionStats struct {
	Partition     int32
	Entries       int64
	ChangelogNext int64 // -1: nothing stored yet
	NextExpiry    int64 // unix nanos of the earliest expiry, 0 if none
}

// Stats reads the stats of every partition of tableTopic under
// stateDir (read-only; fails while a worker holds the table).
func Stats(stateDir, tableTopic string) ([]PartitionStats, error) {
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
		st := PartitionStats{Partition: p}
		st.Entries, err = Meta(db, MetaEntries, 0)
		if err == nil {
			st.ChangelogNext, err = Meta(db, MetaChangelogNext, -1)
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
	it := db.NewIterator(util.BytesPrefix([]byte{DataPrefix}), &opt.ReadOptions{DontFillCache: true})
	defer it.Release()
	var next int64
	for it.Next() {
		if exp, err := codecs.SeenExpiry(it.Value()); err == nil && exp > 0 && (next == 0 || exp < next) {
			next = exp
		}
	}
	return next, it.Error()
}

// Get looks key up in every local partition of tableTopic (read-only).
func Get(stateDir, tableTopic, key string) (Lookup, error) {
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
		v, err := db.Get(DataKey(key), nil)
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

// ErrLocked means a running worker holds the local table.
var ErrLocked = errors.New("a running worker holds this table; stop it, or ask its HTTP address: GET /v1/seen/{id}")

func openReadOnly(stateDir, tableTopic string, p int32) (*leveldb.DB, error) {
	db, err := leveldb.OpenFile(Path(stateDir, tableTopic, p), readOnlyOptions())
	if err != nil && strings.Contains(err.Error(), "resource temporarily unavailable") {
		return nil, fmt.Errorf("%s: %w", Path(stateDir, tableTopic, p), ErrLocked)
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

// readOnlyOptions opens a table without its bloom filter: an offline read
// asks few keys, and LevelDB reads a table without the filter it was
// written with.
func readOnlyOptions() *opt.Options {
	return &opt.Options{ReadOnly: true, ErrorIfMissing: true, DisableBlockCache: true}
}
