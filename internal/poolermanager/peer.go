package poolermanager

import (
	"fmt"
	"os"
	"path/filepath"

	"tusk.dev/tusk/internal/pooler"
)

// PeerConfigName is the file in the run directory PgBouncer runs on when
// it has a peer_id: it includes the mounted configuration and sets the id.
const PeerConfigName = "pgbouncer-peer.ini"

// writePeerConfig writes, in runDir, the configuration PgBouncer runs on
// with peerID: config (made absolute, PgBouncer opens an %include from its
// working directory) included, then peer_id. A RELOAD reads config afresh
// through it. It returns the file's path.
func writePeerConfig(runDir, config string, peerID int) (string, error) {
	abs, err := filepath.Abs(config)
	if err != nil {
		return "", fmt.Errorf("while writing PgBouncer's peer configuration: %w", err)
	}
	ini, err := pooler.PeerINI(abs, peerID)
	if err != nil {
		return "", err
	}
	path := filepath.Join(runDir, PeerConfigName)
	if err := os.WriteFile(path, []byte(ini), 0o600); err != nil {
		return "", fmt.Errorf("while writing PgBouncer's peer configuration: %w", err)
	}
	return path, nil
}
