package processor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	lerrors "github.com/syndtr/goleveldb/leveldb/errors"

	"github.com/dedupkit/dedup/internal/leveldbx"
)

// storeOnDisk writes n committed records id-<i> to a store at a new path and
// closes it with its records in table files (a reopen flushes the journal
// into one), as a worker leaves it when it stops, with files for the damage
// functions to break.
func storeOnDisk(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p0")
	s, err := openStore(path, seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := seenValue(t, time.Now().Add(time.Hour))
	for i := 0; i < n; i++ {
		s.Set(fmt.Sprintf("id-%05d", i), v)
	}
	if err := s.Apply(int64(n)); err != nil {
		t.Fatal(err)
	}
	s = reopened(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(storeFiles(t, path, ".ldb")) == 0 {
		t.Fatalf("no table file in %s after a reopen", path)
	}
	return path
}

func storeFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+suffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// overwrite replaces length bytes of file a third into it with garbage.
func overwrite(t *testing.T, file string, length int) { overwriteAt(t, file, -1, length) }

// overwriteAt replaces length bytes of file from byte at (-1: a third into
// it) with garbage.
func overwriteAt(t *testing.T, file string, at, length int) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if at < 0 {
		at = len(b) / 3
	}
	for i := at; i < at+length && i < len(b); i++ {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// damages are ways a store is damaged while its worker is down. atOpen:
// LevelDB's open finds it; the others are found by the key filter's
// background scan, which reads every table block.
var damages = []struct {
	name   string
	atOpen bool
	damage func(t *testing.T, dir string)
}{
	{"table file deleted", true, func(t *testing.T, dir string) {
		for _, f := range storeFiles(t, dir, ".ldb") {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{"table file bytes flipped", false, func(t *testing.T, dir string) {
		for _, f := range storeFiles(t, dir, ".ldb") {
			overwrite(t, f, 64)
		}
	}},
	{"manifest garbled", true, func(t *testing.T, dir string) {
		for _, f := range storeFiles(t, dir, "") {
			if strings.HasPrefix(filepath.Base(f), "MANIFEST-") {
				overwrite(t, f, 16)
			}
		}
	}},
}

// damageFound opens the damaged store at path and returns the corruption
// error LevelDB's open reported or, when the open did not find the damage,
// the one the key filter build reported; the store is closed.
func damageFound(t *testing.T, path string) (atOpen bool, err error) {
	t.Helper()
	s, err := openStore(path, seenExpiry, nil)
	if err != nil {
		return true, err
	}
	defer s.Close()
	if s.rebuild == nil {
		t.Fatal("no key filter build after open")
	}
	r := <-s.rebuild.done
	s.rebuild.done <- r
	return false, r.err
}

// A store LevelDB's open finds damaged is deleted and opened empty, so the
// restore rebuilds it from the changelog, instead of failing every start.
// Damage the open does not find is found by the key filter's background
// scan: it fails the store's reads and writes and marks it, so the session
// ends, the store is deleted at close, and the rejoin opens it empty.
func TestOpenOrWipeDeletesADamagedStore(t *testing.T) {
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			path := storeOnDisk(t, 3000)
			d.damage(t, path)
			if atOpen, err := damageFound(t, path); err == nil || !leveldbx.Corrupted(err) || atOpen != d.atOpen {
				t.Fatalf("damage found at open %v (want %v): %v, want a corruption error", atOpen, d.atOpen, err)
			}
			s, damage, err := openOrWipe(path, seenExpiry, nil)
			if err != nil {
				t.Fatalf("openOrWipe: %v", err)
			}
			defer func() { s.Close() }()
			if !d.atOpen {
				if damage != nil {
					t.Fatalf("openOrWipe reported damage its open cannot find: %v", damage)
				}
				awaitKeysFailed(t, s)
				if wiped, err := s.closeOrWipe(); !wiped || err != nil {
					t.Fatalf("closeOrWipe: wiped %v, err %v; want the store deleted", wiped, err)
				}
				if _, err := os.Stat(path); !os.IsNotExist(err) {
					t.Fatalf("%s still there after closeOrWipe (%v)", path, err)
				}
				// The rejoin.
				if s, damage, err = openOrWipe(path, seenExpiry, nil); err != nil || damage != nil {
					t.Fatalf("openOrWipe after the delete: damage %v, err %v", damage, err)
				}
			} else if damage == nil {
				t.Error("openOrWipe did not report the damage")
			}
			next, err := s.ChangelogNext()
			if err != nil || next != -1 || s.entries != 0 {
				t.Fatalf("after the wipe: changelog next %d (%v), %d entries; want -1 and 0 (restore from the start)", next, err, s.entries)
			}
		})
	}
}

// awaitKeysFailed waits for the key filter build of s, which must find the
// store damaged, and checks that the store is marked for deletion and that
// its reads, writes and the sweeper's scan fail with the damage.
func awaitKeysFailed(t *testing.T, s *store) {
	t.Helper()
	b := s.rebuild
	if b == nil {
		t.Fatal("no key filter build")
	}
	r := <-b.done
	b.done <- r
	if !leveldbx.Corrupted(r.err) {
		t.Fatalf("key filter build: %v, want a corruption error", r.err)
	}
	if !s.corrupt.Load() {
		t.Error("the store is not marked for deletion after its key filter build found damage")
	}
	if _, err := s.Get("id-00001"); !leveldbx.Corrupted(err) {
		t.Errorf("Get: %v, want the corruption error", err)
	}
	if _, _, err := s.Expired(time.Now().UnixNano(), 10, 10); !leveldbx.Corrupted(err) {
		t.Errorf("Expired: %v, want the corruption error", err)
	}
	if err := s.reserveKeys(1); !leveldbx.Corrupted(err) {
		t.Errorf("reserveKeys: %v, want the corruption error", err)
	}
	s.Set("new", seenValue(t, time.Now().Add(time.Hour)))
	if err := s.Apply(3001); !leveldbx.Corrupted(err) {
		t.Errorf("Apply: %v, want the corruption error", err)
	}
	s.Drop()
	s.maintainKeys()
	if s.rebuild != nil || s.keys != nil {
		t.Errorf("after the failed build: rebuild %v, keys %v; want neither (no filter, no new build)", s.rebuild, s.keys)
	}
}

// Damage LevelDB finds after the store was opened (a lookup reading a
// broken block) fails that read and marks the store: closing it deletes
// it, so the next owner restores the partition.
func TestDamageFoundByALookupDeletesTheStoreAtClose(t *testing.T) {
	path := storeOnDisk(t, 3000)
	s, err := openStore(path, seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	awaitKeys(t, s)
	for _, f := range storeFiles(t, path, ".ldb") {
		overwrite(t, f, 4096) // after open and its scan: only reads find it
	}
	var readErr error
	for i := 0; i < 3000 && readErr == nil; i++ {
		_, readErr = s.Get(fmt.Sprintf("id-%05d", i))
	}
	if readErr == nil || !leveldbx.Corrupted(readErr) {
		t.Fatalf("lookups of the damaged store: %v, want a corruption error", readErr)
	}
	wiped, err := s.closeOrWipe()
	if !wiped || err != nil {
		t.Fatalf("closeOrWipe: wiped %v, err %v; want the store deleted", wiped, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("%s still there after closeOrWipe (%v)", path, err)
	}
}

// An undamaged store is kept.
func TestCloseOrWipeKeepsAHealthyStore(t *testing.T) {
	path := storeOnDisk(t, 10)
	s, err := openStore(path, seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get("id-00003"); err != nil || v == nil {
		t.Fatalf("Get: %v, %v", v, err)
	}
	if wiped, err := s.closeOrWipe(); wiped || err != nil {
		t.Fatalf("closeOrWipe of a healthy store: wiped %v, err %v", wiped, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

// Damage the sweeper's scan finds ends the session at once (the transaction
// is aborted), so the store is deleted at close and restored by the rejoin,
// instead of being warned about on every pass while the member runs on.
func TestSweepOverADamagedStoreEndsTheSession(t *testing.T) {
	path := storeOnDisk(t, 3000)
	s, err := openStore(path, seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	awaitKeys(t, s) // else its scan may find the damage first
	for _, f := range storeFiles(t, path, ".ldb") {
		overwriteAt(t, f, 16, 64) // the first data block: the sweeper's first scan reads it
	}
	prod := newCommitProducer(t)
	m := newTestMember(t, prod)
	ended := false
	m.session.cancelSession = func() { ended = true }
	m.tables.own(&partitionTable{m: m, p: 0, store: s})

	m.sweep(time.Now().Add(2 * time.Hour)) // every record expired: the scan reads every block
	if !m.tx.failed || !ended {
		t.Fatalf("after the sweep found damage: failed %v, session ended %v; want both", m.tx.failed, ended)
	}
	if !s.corrupt.Load() {
		t.Error("the store is not marked for deletion")
	}
	if prod.aborted == 0 {
		t.Error("the open transaction was not aborted")
	}
}

// Only the state dir's file system failing stops the member (keepStores):
// damage is restored, and Kafka's errors are retried by rejoining.
func TestDiskErrorIsTheFileSystemOnly(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, openErr := openStore(filepath.Join(notADir, "p0"), seenExpiry, nil) // its parent is a file
	if openErr == nil {
		t.Fatal("opened a store under a regular file")
	}
	held, err := openStore(filepath.Join(t.TempDir(), "p0"), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, lockErr := openStore(held.path, seenExpiry, nil) // a member that has not closed it yet
	type testCase struct {
		name string
		err  error
		want bool
	}
	cases := []testCase{
		{"disk full, wrapped", fmt.Errorf("partition 0: %w", &fs.PathError{Op: "write", Path: "000001.log", Err: syscall.ENOSPC}), true},
		{"state dir under a file", openErr, true},
		{"damage reported by a file operation", &fs.PathError{Op: "read", Path: "000005.ldb",
			Err: &lerrors.ErrCorrupted{Err: errors.New("checksum mismatch")}}, false},
		{"store still held (LevelDB's lock): retried by rejoining", lockErr, false},
		{"broker refused the connection", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
		{"no broker left", fmt.Errorf("fetch changelog: %w", sarama.ErrOutOfBrokers), false},
		{"session ended", context.Canceled, false},
	}
	for _, d := range damages { // LevelDB's own damage reports, deleted and restored instead
		path := storeOnDisk(t, 3000)
		d.damage(t, path)
		_, err := damageFound(t, path)
		cases = append(cases, testCase{"damaged store: " + d.name, err, false})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("no error to classify")
			}
			if got := diskError(tc.err); got != tc.want {
				t.Errorf("diskError(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// Damage the key filter's background scan finds after the partition was
// handed to the loop fails the next event's lookup; the transaction is
// aborted and the session ends, but the member does not stop: the store is
// deleted when the session's stores are closed, and the rejoin restores it.
func TestDamageFoundByTheKeyFilterBuildEndsTheSession(t *testing.T) {
	path := storeOnDisk(t, 3000)
	for _, f := range storeFiles(t, path, ".ldb") {
		overwrite(t, f, 64) // LevelDB's open does not read table blocks
	}
	s, err := openStore(path, seenExpiry, nil)
	if err != nil {
		t.Fatalf("openStore: %v; want the damage left to the key filter's scan", err)
	}
	prod := newCommitProducer(t)
	m := newTestMember(t, prod)
	ended := false
	m.session.cancelSession = func() { ended = true }
	m.tables.own(&partitionTable{m: m, p: 0, store: s})
	m.session.restores = map[int32]*partitionRestore{0: {p: 0, store: s, ok: true}}
	r := <-s.rebuild.done // the scan found the damage
	s.rebuild.done <- r

	processNow(m, benchSession{ctx: context.Background()}, prepared(m, loopMessage(m.topo, 1)))
	if !m.tx.failed || !ended || m.session.fatal != nil {
		t.Fatalf("after the lookup failed: failed %v, session ended %v, fatal %v; want the session ended, the member not stopped",
			m.tx.failed, ended, m.session.fatal)
	}
	if prod.aborted == 0 {
		t.Error("the open transaction was not aborted")
	}
	m.keepStores()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("%s still there after the session's stores were closed (%v)", path, err)
	}
}
