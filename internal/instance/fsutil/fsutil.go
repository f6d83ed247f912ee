// Package fsutil writes files so that they survive a crash whole: the
// instance manager's state files and certificates, read again after a
// restart, are either the old content or the new, never half of either.
package fsutil

import (
	"errors"
	"os"
	"path/filepath"
)

// WriteFileAtomically writes data to path with mode 0600, creating its
// directory (0700): through a temporary file, synced, renamed into place,
// and the directory synced so that the rename is durable too before the
// caller relies on it.
func WriteFileAtomically(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // after the rename, nothing
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if err = errors.Join(err, tmp.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes the renames and removals in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir) //nolint:gosec // a directory of the manager's own
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}
