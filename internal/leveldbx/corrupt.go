// Package leveldbx holds what both runtimes need to know about LevelDB's
// errors: which of them mean damaged files, the ones a store is deleted and
// restored from its changelog for.
package leveldbx

import (
	"errors"

	lerrors "github.com/syndtr/goleveldb/leveldb/errors"
	"github.com/syndtr/goleveldb/leveldb/storage"
)

// Corrupted reports whether err says LevelDB found its files damaged (a bad
// block or journal checksum, a missing table file, a broken manifest).
// goleveldb's own errors.IsCorrupted does not look through wrapping, and
// both runtimes wrap the error with the store's path.
func Corrupted(err error) bool {
	var c *lerrors.ErrCorrupted
	var sc *storage.ErrCorrupted
	return errors.As(err, &c) || errors.As(err, &sc)
}
