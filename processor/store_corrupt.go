package processor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/dedupkit/dedup/internal/leveldbx"
)

// A partition store is a cache of its changelog: everything in it can be
// read back from Kafka. So a store LevelDB reports damaged (a bad block or
// journal checksum, a missing table file, a broken manifest: a disk fault,
// a full disk, a file deleted by hand) is deleted and restored from the
// changelog, as Kafka Streams does with a corrupted state store, instead of
// failing every start or every transaction that reads the damaged part.
//
// Damage LevelDB's open reports (a broken manifest, a missing table file)
// is handled there (openOrWipe). The open does not read the table blocks:
// the key filter's scan of every stored key, which does, runs in the
// background after it (keyfilter.go), so that a worker restarted on a big
// table starts its restores at once. Damage found later, by that scan, a
// lookup, the sweeper or a commit's write, fails the transaction like any
// store error; the store remembers it, and the member deletes it when it
// closes it at the end of the session. Once the scan found damage, the
// store's lookups, restore writes and sweeper scans all fail with it
// (keysErr): the store cannot be trusted any more, and a partition without
// traffic still ends its session, at the next sweep. Damage found by a
// lookup, the sweeper or the scan ends the session, so the rejoin restores
// the store; a commit's write stops the member (member.committed), and the
// next start restores it.

// diskError reports whether err is the state dir's file system failing (a
// full disk, a read-only mount, a path that is not a directory, an I/O
// error) rather than damaged data, which is deleted and restored, or Kafka.
// Only file operations return a *fs.PathError; sarama's network errors are
// *net.OpError.
func diskError(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && !leveldbx.Corrupted(err)
}

// noteCorrupt marks the store for deletion at close when err is damage, and
// returns err. The loop and the commit goroutine both call it.
func (s *store) noteCorrupt(err error) error {
	if err != nil && leveldbx.Corrupted(err) {
		s.corrupt.Store(true)
	}
	return err
}

// openOrWipe opens the store at path. When LevelDB finds it damaged, it
// deletes it and opens an empty one, which the caller restores from the
// changelog; damage is then the error that made it do so.
func openOrWipe(path string, expiry expiryFunc, pace *scanPacer) (s *store, damage error, err error) {
	s, err = openStore(path, expiry, pace)
	if err == nil || !leveldbx.Corrupted(err) {
		return s, nil, err
	}
	damage = err
	if err := os.RemoveAll(path); err != nil {
		return nil, damage, fmt.Errorf("delete damaged table store: %w", err)
	}
	s, err = openStore(path, expiry, pace)
	return s, damage, err
}

// closeOrWipe closes the store and deletes it when it was found damaged;
// true when it did.
func (s *store) closeOrWipe() (wiped bool, err error) {
	err = s.Close()
	if !s.corrupt.Load() {
		return false, err
	}
	return true, errors.Join(err, os.RemoveAll(s.path))
}
