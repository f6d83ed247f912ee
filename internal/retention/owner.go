package retention

import (
	"context"
	"errors"
	"fmt"

	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/walarchive"
)

// ErrNotOwner is wrapped by CheckOwner's refusal: the location is not
// proved to hold this database system's archive, and pruning it could
// delete another cluster's backups and WAL for good.
var ErrNotOwner = errors.New("retention refused")

// CheckOwner says whether retention may prune the store's location for
// the database system systemID: only when the location's marker (which
// the first archiving instance writes, walarchive.MarkerKey) names that
// system. A cluster whose spec points, by mistake or on purpose, at
// another cluster's location is refused before anything is listed or
// deleted; so is a location without a marker, and a cluster whose system
// is not known yet.
func CheckOwner(ctx context.Context, store *objectstore.Store, systemID string) error {
	if systemID == "" {
		return fmt.Errorf("%w: the cluster's database system identifier is not known yet (its primary has not reported one), so nothing proves %s is its own", ErrNotOwner, store.Location())
	}
	m, found, err := walarchive.ReadMarker(ctx, store)
	if err != nil {
		return fmt.Errorf("while reading the marker of %s: %w", store.Location(), err)
	}
	if !found {
		return fmt.Errorf("%w: %s has no %s naming the database system whose archive it holds (the cluster's first archived WAL writes it), so nothing proves it is this cluster's", ErrNotOwner, store.Location(), walarchive.MarkerKey)
	}
	if m.SystemIdentifier != systemID {
		// The marker's cluster name stays out: this message reaches the
		// status of whoever pointed the spec here.
		return fmt.Errorf("%w: %s holds the WAL and backups of database system %s, and this cluster is database system %s: retention prunes only the cluster's own location; set spec.backup.objectStore.path to a location of its own", ErrNotOwner, store.Location(), m.SystemIdentifier, systemID)
	}
	return nil
}
