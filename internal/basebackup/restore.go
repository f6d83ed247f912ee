package basebackup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"tusk.dev/tusk/internal/objectstore"
)

// RestoreOptions say which backup to restore where.
type RestoreOptions struct {
	Name  string
	Store *objectstore.Store
	// TargetDir must be empty or missing; it becomes the data directory.
	TargetDir string
	Target    Target
	// RestoreCommand is the restore_command written for recovery.
	RestoreCommand string
}

// Restore extracts backup Name into TargetDir, verifying every file
// against the backup manifest, and writes the settings that make postgres,
// started on it, recover from the WAL archive to the target and promote.
// Every check that can be made beforehand (the backup exists, the
// directory is empty, the target is reachable) is, before anything is
// written; a failure afterwards removes what was written.
func Restore(ctx context.Context, o RestoreOptions) (*Record, error) {
	if o.RestoreCommand == "" {
		return nil, errors.New("no restore_command to recover with")
	}
	if err := refuseNonEmpty(o.TargetDir); err != nil {
		return nil, err
	}
	rec, err := LoadRecord(ctx, o.Store, o.Name)
	if err != nil {
		return nil, err
	}
	if err := o.Target.validate(rec); err != nil {
		return nil, err
	}
	created, err := makeDataDir(o.TargetDir)
	if err != nil {
		return nil, err
	}
	if err := o.extract(ctx, rec); err != nil {
		clearDir(o.TargetDir, created)
		return nil, err
	}
	return rec, nil
}

// refuseNonEmpty fails unless dir is missing or an empty directory.
func refuseNonEmpty(dir string) error {
	if dir == "" {
		return errors.New("no target directory to restore into")
	}
	f, err := os.Open(dir) //nolint:gosec // the directory we are told to restore into
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("while checking the target directory: %w", err)
	}
	defer func() { _ = f.Close() }()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("refusing to restore into %s: it is not empty (it holds %s); restore into an empty or new directory", dir, names[0])
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("while checking the target directory %s: %w", dir, err)
	}
	return nil
}

// makeDataDir creates dir with the permissions postgres requires, and says
// whether it created it.
func makeDataDir(dir string) (bool, error) {
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, os.ErrExist) {
		return false, os.Chmod(dir, 0o700) //nolint:gosec // a data directory: postgres requires 0700
	}
	if err != nil {
		return false, fmt.Errorf("while creating the target directory: %w", err)
	}
	return true, nil
}

// clearDir removes what a failed restore wrote: dir itself when it made
// it, its content otherwise.
func clearDir(dir string, created bool) {
	if created {
		_ = os.RemoveAll(dir)
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// extract downloads, decompresses, verifies and writes the backup, then
// the recovery settings, and syncs the file system.
func (o RestoreOptions) extract(ctx context.Context, rec *Record) error {
	body, _, err := o.Store.Get(ctx, DataKey(o.Name))
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	dec, err := zstd.NewReader(body, zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return err
	}
	defer dec.Close()
	raw := &countingReader{r: dec}
	m, err := checkTar(raw, rec.ManifestChecksumAlgorithm, dirWriter{root: o.TargetDir})
	if err != nil {
		return fmt.Errorf("while restoring backup %q: %w", o.Name, err)
	}
	if m.Checksum != rec.ManifestChecksum || raw.n != rec.Size {
		return fmt.Errorf("while restoring backup %q: %w: its manifest's checksum is %s and its stream %d bytes, its record says %s and %d bytes",
			o.Name, ErrVerification, m.Checksum, raw.n, rec.ManifestChecksum, rec.Size)
	}
	if err := o.writeRecoverySettings(); err != nil {
		return err
	}
	return syncFS(o.TargetDir)
}

func (o RestoreOptions) writeRecoverySettings() error {
	auto := filepath.Join(o.TargetDir, "postgresql.auto.conf")
	f, err := os.OpenFile(auto, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600) //nolint:gosec // in the directory we restore
	if err != nil {
		return fmt.Errorf("while writing the recovery settings: %w", err)
	}
	_, err = f.WriteString(RecoverySettings(o.Name, o.RestoreCommand, o.Target))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("while writing the recovery settings: %w", err)
	}
	// A backup taken from a standby holds its standby.signal, which would
	// make the restored copy a standby of the source's primary instead of
	// recovering from the archive and promoting.
	if err := os.Remove(filepath.Join(o.TargetDir, "standby.signal")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("while removing the source's standby.signal: %w", err)
	}
	return os.WriteFile(filepath.Join(o.TargetDir, "recovery.signal"), nil, 0o600)
}

// syncFS flushes the file system holding dir: one call instead of one
// fsync per file.
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("while syncing the restored files: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("while syncing the restored files: %w", err)
	}
	return nil
}

// dirWriter is the sink that writes the backup under root.
type dirWriter struct{ root string }

func (d dirWriter) dir(name string) error {
	return os.MkdirAll(filepath.Join(d.root, filepath.FromSlash(name)), 0o700)
}

func (d dirWriter) file(name string, _ int64, r io.Reader) error {
	path := filepath.Join(d.root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600) //nolint:gosec // a checked relative path under root
	if err != nil {
		return fmt.Errorf("while restoring %s: %w", name, err)
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return fmt.Errorf("while restoring %s: %w", name, err)
	}
	return f.Close()
}
