package processor

import (
	"fmt"
	"path/filepath"

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
	db, err := leveldb.OpenFile(TablePath(stateDir, tableTopic, partition), &opt.Options{ReadOnly: true, ErrorIfMissing: true})
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
