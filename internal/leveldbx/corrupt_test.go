package leveldbx

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	lerrors "github.com/syndtr/goleveldb/leveldb/errors"
	"github.com/syndtr/goleveldb/leveldb/storage"
)

func TestCorrupted(t *testing.T) {
	fd := storage.FileDesc{Type: storage.TypeTable, Num: 7}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"block checksum", lerrors.NewErrCorrupted(fd, errors.New("checksum mismatch")), true},
		{"manifest, wrapped", fmt.Errorf("open table store x: %w", &storage.ErrCorrupted{Fd: fd, Err: errors.New("bad record")}), true},
		{"full disk", fmt.Errorf("write: %w", &fs.PathError{Op: "write", Path: "x", Err: errors.New("no space left on device")}), false},
		{"nil", nil, false},
	} {
		if got := Corrupted(tc.err); got != tc.want {
			t.Errorf("%s: Corrupted(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
