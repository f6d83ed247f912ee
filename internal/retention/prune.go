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

// MaxBackupDirectories bounds the backup directories Load takes from one
// listing. A cluster keeps a handful per retention period (one a day for a
// year is 365); a listing of many more is not a cluster's location, or is
// an endpoint that lists without end, and would fill the operator's memory.
const MaxBackupDirectories = 10000

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
		if b == nil && len(dirs) == MaxBackupDirectories {
			return nil, fmt.Errorf("%s%s lists more than %d backup directories: retention stops rather than hold them all (a location of one cluster has far fewer)",
				store.Location(), basebackup.Prefix, MaxBackupDirectories)
		}
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

// pruneWAL deletes the archived WAL below w, each file as the listing
// reaches it: what one run holds stays small however much WAL there is
// (S3 lists after the last key returned, so a deletion behind the listing
// changes nothing ahead of it).
func pruneWAL(ctx context.Context, store *objectstore.Store, w *WALBoundary) (int, error) {
	n := 0
	for obj, err := range store.List(ctx, walarchive.WALPrefix) {
		if err != nil {
			return n, fmt.Errorf("while listing the archived WAL: %w", err)
		}
		name, ok := strings.CutSuffix(obj.Key[strings.LastIndexByte(obj.Key, '/')+1:], walarchive.Extension)
		if !ok || !w.Deletes(name) || obj.Key != mustKey(name) {
			continue
		}
		if err := store.Delete(ctx, obj.Key); err != nil {
			return n, fmt.Errorf("while deleting archived WAL: %w", err)
		}
		n++
	}
	return n, nil
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

// deletePrefix deletes every object under prefix, as the listing reaches
// it (pruneWAL says why).
func deletePrefix(ctx context.Context, store *objectstore.Store, prefix string) error {
	for obj, err := range store.List(ctx, prefix) {
		if err != nil {
			return err
		}
		if err := store.Delete(ctx, obj.Key); err != nil {
			return err
		}
	}
	return nil
}
