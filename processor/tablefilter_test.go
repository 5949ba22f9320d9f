package processor

import (
	"strconv"
	"testing"
	"time"

	"github.com/syndtr/goleveldb/leveldb/util"
)

// filterOf generates one filter over keys, as a table writer does.
func filterOf(keys ...[]byte) []byte {
	g := newTableFilter().NewGenerator()
	for _, k := range keys {
		g.Add(k)
	}
	var b util.Buffer
	g.Generate(&b)
	return b.Bytes()
}

func TestTableFilterCoversTableRecordsOnly(t *testing.T) {
	f := newTableFilter()
	var data, other [][]byte
	for i := range 1000 {
		data = append(data, dataKey("evt-"+strconv.Itoa(i)))
		other = append(other, []byte("x"+strconv.Itoa(i))) // any key that is not a table record
	}
	both := filterOf(append(append([][]byte{}, data...), other...)...)
	if dataOnly := filterOf(data...); len(both) != len(dataOnly) {
		t.Fatalf("filter over data and other keys is %d bytes, over data keys %d: other keys were added", len(both), len(dataOnly))
	}
	for _, k := range data {
		if !f.Contains(both, k) {
			t.Fatalf("%q was added but the filter says absent", k)
		}
	}
	// Keys it was not built over must still be "may contain", or LevelDB
	// would skip the tables that hold them.
	onlyOther := filterOf(other...)
	for _, k := range [][]byte{other[0], []byte(metaChangelogNext), []byte(metaEntries)} {
		if !f.Contains(onlyOther, k) {
			t.Fatalf("%q: filter says absent for a key it does not cover", k)
		}
	}
	if f.Contains(onlyOther, data[0]) {
		t.Fatal("a filter of a block without table records says it may hold one")
	}
}

// Everything a store reads must be found once it sits in table files, where
// the filter is consulted (the memtable has none): table records and the
// metadata, and the sweeper's scan.
func TestStoreReadsItsTableFiles(t *testing.T) {
	s, err := openStore(t.TempDir(), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	const n, expired = 3000, 10
	for i := range n {
		exp := now.Add(time.Hour)
		if i < expired {
			exp = now.Add(-time.Hour)
		}
		s.Set("evt-"+strconv.Itoa(i), seenValue(t, exp))
	}
	if err := s.Apply(n); err != nil {
		t.Fatal(err)
	}
	if err := s.db.CompactRange(util.Range{}); err != nil {
		t.Fatal(err)
	}
	s = reopened(t, s)
	if next, err := s.ChangelogNext(); err != nil || next != n || s.entries != n {
		t.Fatalf("changelog next %d (%v), entries %d; want %d, %d", next, err, s.entries, n, n)
	}
	for i := range n {
		if v, err := s.Get("evt-" + strconv.Itoa(i)); v == nil || err != nil {
			t.Fatalf("evt-%d not found in the table files (%v)", i, err)
		}
	}
	if v, _ := s.Get("evt-absent"); v != nil {
		t.Fatal("a key never written was found")
	}
	if keys, _, err := s.Expired(now.UnixNano(), 100, n); err != nil || len(keys) != expired {
		t.Fatalf("expired keys %d (%v), want %d", len(keys), err, expired)
	}
}
