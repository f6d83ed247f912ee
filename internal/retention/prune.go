package retention

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
	"tusk.dev/tusk/internal/walarchive"
)

// Load lists the backup directories of the store's location: complete
// ones with what their record says, unreadable and incomplete ones.
func Load(ctx context.Context, store *objectstore.Store) ([]Backup, error) {
	dirs := map[string]*Backup{}
	var names []string
	for obj, err := range store.List(ctx, basebackup.Prefix) {
		if err != nil {
			return nil, err
		}
		name, file, ok := strings.Cut(strings.TrimPrefix(obj.Key, basebackup.Prefix), "/")
		if !ok {
			continue
		}
		b := dirs[name]
		if b == nil {
			b = &Backup{Name: name, State: Incomplete}
			dirs[name] = b
			names = append(names, name)
		}
		if file == basebackup.RecordObject {
			b.State = Complete
		}
		if obj.LastModified.After(b.End) {
			b.End = obj.LastModified
		}
	}
	backups := make([]Backup, 0, len(names))
	for _, name := range names {
		b := dirs[name]
		if b.State == Complete {
			if err := readRecord(ctx, store, b); err != nil {
				return nil, err
			}
		}
		backups = append(backups, *b)
	}
	return backups, nil
}

// readRecord fills b from its record; a record this version cannot read
// makes b Unreadable, a store error is returned.
func readRecord(ctx context.Context, store *objectstore.Store, b *Backup) error {
	rec, err := basebackup.LoadRecord(ctx, store, b.Name)
	if err != nil {
		if se := (*objectstore.Error)(nil); errors.As(err, &se) {
			return err
		}
		b.State = Unreadable
		return nil
	}
	seg, err := postgres.ParseWALFileName(rec.BeginWAL, rec.WALSegmentSize)
	if err != nil || rec.EndTime.IsZero() {
		b.State = Unreadable
		return nil
	}
	b.End, b.Begin = rec.EndTime, seg
	return nil
}

// Result is what Prune deleted.
type Result struct {
	Backups     []string // complete backups deleted
	Interrupted []string // incomplete directories deleted
	WALObjects  int
}

// Prune carries out p: for each backup, its record first (a half-pruned
// backup never looks complete), then its data; then the incomplete
// directories; then the WAL below the boundary. The first store error
// stops it; what was deleted until then is in the Result.
func Prune(ctx context.Context, store *objectstore.Store, p Plan) (Result, error) {
	var res Result
	for _, name := range p.Delete {
		if err := store.Delete(ctx, basebackup.RecordKey(name)); err != nil {
			return res, fmt.Errorf("while deleting the record of backup %q: %w", name, err)
		}
		if err := deletePrefix(ctx, store, basebackup.Prefix+name+"/"); err != nil {
			return res, fmt.Errorf("while deleting backup %q: %w", name, err)
		}
		res.Backups = append(res.Backups, name)
	}
	for _, name := range p.Interrupted {
		if err := deletePrefix(ctx, store, basebackup.Prefix+name+"/"); err != nil {
			return res, fmt.Errorf("while deleting the interrupted backup %q: %w", name, err)
		}
		res.Interrupted = append(res.Interrupted, name)
	}
	if p.WAL == nil {
		return res, nil
	}
	n, err := pruneWAL(ctx, store, p.WAL)
	res.WALObjects = n
	return res, err
}

// pruneWAL deletes the archived WAL below w.
func pruneWAL(ctx context.Context, store *objectstore.Store, w *WALBoundary) (int, error) {
	var doomed []string
	for obj, err := range store.List(ctx, walarchive.WALPrefix) {
		if err != nil {
			return 0, fmt.Errorf("while listing the archived WAL: %w", err)
		}
		name, ok := strings.CutSuffix(obj.Key[strings.LastIndexByte(obj.Key, '/')+1:], walarchive.Extension)
		if ok && w.Deletes(name) && obj.Key == mustKey(name) {
			doomed = append(doomed, obj.Key)
		}
	}
	for i, key := range doomed {
		if err := store.Delete(ctx, key); err != nil {
			return i, fmt.Errorf("while deleting archived WAL: %w", err)
		}
	}
	return len(doomed), nil
}

// mustKey is where the archive puts name ("" when it would not): an
// object elsewhere under wal/ is not the archive's, and is kept.
func mustKey(name string) string {
	key, err := walarchive.Key(name)
	if err != nil {
		return ""
	}
	return key
}

// deletePrefix deletes every object under prefix.
func deletePrefix(ctx context.Context, store *objectstore.Store, prefix string) error {
	var keys []string
	for obj, err := range store.List(ctx, prefix) {
		if err != nil {
			return err
		}
		keys = append(keys, obj.Key)
	}
	for _, key := range keys {
		if err := store.Delete(ctx, key); err != nil {
			return err
		}
	}
	return nil
}
