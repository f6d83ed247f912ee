package poolermanager

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"tusk.dev/tusk/internal/poolerapi"
)

// listenPort reads listen_port from the [pgbouncer] section of the ini at
// path (poolerapi.PgBouncerPort when it names none): where readiness
// checks that PgBouncer accepts connections, and the name of its admin
// socket in the run directory.
func listenPort(path string) (int, error) {
	f, err := os.Open(path) //nolint:gosec // the configuration the pod mounts
	if err != nil {
		return 0, fmt.Errorf("while reading PgBouncer's configuration: %w", err)
	}
	defer func() { _ = f.Close() }()
	port, section := poolerapi.PgBouncerPort, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = strings.Trim(line, "[] ")
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || section != "pgbouncer" || strings.TrimSpace(key) != "listen_port" {
			continue
		}
		if port, err = strconv.Atoi(strings.TrimSpace(value)); err != nil || port < 1 || port > 65535 {
			return 0, fmt.Errorf("PgBouncer's configuration %s: listen_port %q is not a port", path, strings.TrimSpace(value))
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("while reading PgBouncer's configuration: %w", err)
	}
	return port, nil
}
