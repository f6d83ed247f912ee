package walarchive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/objectstore"
)

// MarkerKey is the object at the top of a location that names the one
// database system whose WAL and backups the location holds. Two databases
// archiving to one location would mix their WAL (the same segment names on
// the same timelines), and each one's retention would prune the other's
// backups: the marker makes the second one stop before it writes anything.
const MarkerKey = "tusk-location.json"

// Marker is the content of MarkerKey.
type Marker struct {
	// SystemIdentifier is the database system identifier (pg_controldata):
	// every instance of a cluster, and a cluster recovered or cloned from
	// its backups, share it; a new initdb gets a new one.
	SystemIdentifier string `json:"systemIdentifier"`
	// Cluster names the cluster that claimed the location
	// ("cluster namespace/name"), for messages.
	Cluster   string    `json:"cluster,omitempty"`
	ClaimedAt time.Time `json:"claimedAt"`
}

// ErrLocationTaken is wrapped by the error of a claim on a location that
// holds another database system's archive.
var ErrLocationTaken = errors.New("the location holds another database's archive")

// claim is the state of one Archiver's claim on its location, shared by
// its copies: it is checked against the store once, then trusted.
type claim struct {
	systemID, cluster string
	mu                sync.Mutex
	done              bool
}

// Claim makes sure the Archiver's location belongs to its database system
// (Config.SystemIdentifier): it writes the marker when the location has
// none, and fails, wrapping ErrLocationTaken, when the marker, or a backup
// of a location used before markers existed, names another system. Every
// archiving call claims first; a backup must too. An Archiver whose Config
// names no system identifier (a tool run by hand) claims nothing.
func (a Archiver) Claim(ctx context.Context) error {
	c := a.claim
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return nil
	}
	if err := claimLocation(ctx, a.Store, c.systemID, c.cluster); err != nil {
		return err
	}
	c.done = true
	return nil
}

func claimLocation(ctx context.Context, store *objectstore.Store, systemID, cluster string) error {
	m, found, err := ReadMarker(ctx, store)
	if err != nil {
		return err
	}
	if found {
		return sameSystem(store, m, systemID)
	}
	other, err := backupOfAnotherSystem(ctx, store, systemID)
	if err != nil {
		return fmt.Errorf("while reading the backups at %s to claim it: %w", store.Location(), err)
	}
	if other != nil {
		return sameSystem(store, *other, systemID)
	}
	data, err := json.Marshal(Marker{SystemIdentifier: systemID, Cluster: cluster, ClaimedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := store.PutSized(ctx, MarkerKey, data, nil); err != nil {
		return fmt.Errorf("while claiming %s for database system %s: %w", store.Location(), systemID, err)
	}
	// Two databases claiming at once both write; the store keeps the last
	// write, and the one that reads back the other's marker stops.
	m, found, err = ReadMarker(ctx, store)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("the marker %s%s written to claim the location is not there", store.Location(), MarkerKey)
	}
	return sameSystem(store, m, systemID)
}

func sameSystem(store *objectstore.Store, m Marker, systemID string) error {
	if m.SystemIdentifier == systemID {
		return nil
	}
	owner := "database system " + m.SystemIdentifier
	if m.Cluster != "" {
		owner += " (" + m.Cluster + ")"
	}
	return fmt.Errorf("%w: %s holds the WAL and backups of %s, and this is database system %s; "+
		"two databases must never share a location (their WAL would mix and each one's retention would prune the other's backups): "+
		"set spec.backup.objectStore.path to a location of its own", ErrLocationTaken, store.Location(), owner, systemID)
}

// maxMarkerSize bounds what ReadMarker reads.
const maxMarkerSize = 64 << 10

// ReadMarker reads the location's marker; found is false when it has
// none. A marker that names no database system is an error: Tusk did not
// write it.
func ReadMarker(ctx context.Context, store *objectstore.Store) (m Marker, found bool, err error) {
	body, _, err := store.Get(ctx, MarkerKey)
	if objectstore.IsNotFound(err) {
		return Marker{}, false, nil
	}
	if err != nil {
		return Marker{}, false, err
	}
	defer func() { _ = body.Close() }()
	data, err := io.ReadAll(io.LimitReader(body, maxMarkerSize))
	if err != nil {
		return Marker{}, false, fmt.Errorf("while reading %s%s: %w", store.Location(), MarkerKey, err)
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil || m.SystemIdentifier == "" {
		return Marker{}, false, fmt.Errorf("%s%s does not name a database system (%v): a location marker Tusk did not write; "+
			"choose another location, or remove it if the location is this cluster's", store.Location(), MarkerKey, err)
	}
	return m, true, nil
}

// backupOfAnotherSystem returns a marker for the first completed backup at
// the location whose system is not systemID (nil when there is none): a
// location that clusters of an older Tusk archived to has backups but no
// marker.
func backupOfAnotherSystem(ctx context.Context, store *objectstore.Store, systemID string) (*Marker, error) {
	for obj, err := range store.List(ctx, basebackup.Prefix) {
		if err != nil {
			return nil, err
		}
		rest, ok := strings.CutPrefix(obj.Key, basebackup.Prefix)
		name, object, _ := strings.Cut(rest, "/")
		if !ok || object != basebackup.RecordObject {
			continue
		}
		rec, err := basebackup.LoadRecord(ctx, store, name)
		if err != nil {
			continue // not a backup this version reads: it proves nothing
		}
		if rec.SystemIdentifier != "" && rec.SystemIdentifier != systemID {
			return &Marker{SystemIdentifier: rec.SystemIdentifier, Cluster: "backup " + name}, nil
		}
	}
	return nil, nil
}
