package walarchive

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"tusk.dev/tusk/internal/objectstore"
)

// ConfigEnv names the environment variable that holds the configuration
// file's path when the command line gives none.
const ConfigEnv = "TUSK_WAL_ARCHIVE_CONFIG"

// Config is the file the archive commands read: where the archive is. The
// instance manager writes it; credentials stay in their mounted files. The
// object store path is the cluster's location, the cluster's name when
// empty (as spec.backup.objectStore.path defaults).
//
//	{"cluster": "orders",
//	 "objectStore": {"endpoint": "https://s3.example.com", "bucket": "backups",
//	   "path": "prod", "accessKeyIDFile": "/etc/tusk/s3/id",
//	   "secretAccessKeyFile": "/etc/tusk/s3/secret"}}
type Config struct {
	Cluster     string             `json:"cluster"`
	ObjectStore objectstore.Config `json:"objectStore"`
	// SystemIdentifier is the database system identifier of the data
	// directory that archives: the location is claimed for it (see
	// Archiver.Claim). The instance manager writes it; empty claims nothing.
	SystemIdentifier string `json:"systemIdentifier,omitempty"`
}

// LoadConfig reads the configuration from path, or from the file
// $TUSK_WAL_ARCHIVE_CONFIG names when path is empty. Unknown fields are
// errors: a misspelt one would otherwise be silently ignored.
func LoadConfig(path string) (Config, error) {
	if path == "" {
		path = os.Getenv(ConfigEnv)
	}
	if path == "" {
		return Config{}, fmt.Errorf("no WAL archive configuration: pass --config or set %s", ConfigEnv)
	}
	data, err := os.ReadFile(path) //nolint:gosec // the configuration file we are told to read
	if err != nil {
		return Config{}, fmt.Errorf("while reading the WAL archive configuration: %w", err)
	}
	var cfg Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("while parsing the WAL archive configuration %s: %w", path, err)
	}
	return cfg, nil
}

// NewArchiver checks cfg and returns an Archiver for it.
func NewArchiver(cfg Config) (Archiver, error) {
	if err := validateClusterName(cfg.Cluster); err != nil {
		return Archiver{}, err
	}
	if cfg.ObjectStore.Endpoint == "" {
		return Archiver{}, errors.New("the WAL archive configuration has no objectStore.endpoint")
	}
	if strings.Trim(cfg.ObjectStore.Path, "/") == "" {
		cfg.ObjectStore.Path = cfg.Cluster
	}
	store, err := objectstore.New(cfg.ObjectStore)
	if err != nil {
		return Archiver{}, err
	}
	a := Archiver{Store: store}
	if cfg.SystemIdentifier != "" {
		a.claim = &claim{systemID: cfg.SystemIdentifier, cluster: "cluster " + cfg.Cluster}
	}
	return a, nil
}

// validateClusterName checks that the cluster's name can be its default
// location.
func validateClusterName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
		return fmt.Errorf("cluster name %q cannot name a WAL archive: it must be non-empty, without slashes", name)
	}
	return nil
}

// ArchiverSource returns a Watcher's NewArchiver for the configuration
// file at configPath (the archive command's): it makes the Archiver once,
// and again only when that file or one it names (credentials, CA) has
// changed since, so that a changed Secret, or a data directory of another
// system, counts at the next batch as it does for every run of the archive
// command. Making one per batch
// instead gave every batch a new HTTP transport whose idle connections
// lingered for 90 s: hundreds of sockets and ~140 MiB under a bulk load.
// It is not safe for concurrent use; a Watcher calls it from Run only.
func ArchiverSource(configPath string) func() (Archiver, error) {
	var current Archiver
	var made [sha256.Size]byte
	return func() (Archiver, error) {
		cfg, err := LoadConfig(configPath)
		if err != nil {
			return Archiver{}, err
		}
		stamp := filesStamp(configPath, cfg.ObjectStore.AccessKeyIDFile, cfg.ObjectStore.SecretAccessKeyFile, cfg.ObjectStore.CAFile)
		if current.Store != nil && stamp == made {
			return current, nil
		}
		a, err := NewArchiver(cfg)
		if err != nil {
			return Archiver{}, err
		}
		current, made = a, stamp
		return a, nil
	}
}

// filesStamp is a digest of the files' contents (a missing or unreadable
// file counts as its error message).
func filesStamp(paths ...string) [sha256.Size]byte {
	h := sha256.New()
	for _, p := range paths {
		if p == "" {
			continue
		}
		data, err := os.ReadFile(p) //nolint:gosec // a file the configuration names
		if err != nil {
			data = []byte(err.Error())
		}
		_, _ = fmt.Fprintf(h, "%s\x00%d\x00", p, len(data))
		h.Write(data)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
