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
	ini, err := readINI(path)
	if err != nil {
		return 0, err
	}
	value, ok := ini["pgbouncer.listen_port"]
	if !ok {
		return poolerapi.PgBouncerPort, nil
	}
	port, err := strconv.Atoi(value)
	if err != nil || port < 1 || port > 65535 {
		return 0, fmt.Errorf("PgBouncer's configuration %s: listen_port %q is not a port", path, value)
	}
	return port, nil
}

// readINI reads the ini at path as "section.key" → value (the last one
// of a key wins, as in PgBouncer).
func readINI(path string) (map[string]string, error) {
	f, err := os.Open(path) //nolint:gosec // the configuration the pod mounts
	if err != nil {
		return nil, fmt.Errorf("while reading PgBouncer's configuration: %w", err)
	}
	defer func() { _ = f.Close() }()
	keys, section := map[string]string{}, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = strings.Trim(line, "[] ")
			continue
		}
		if key, value, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, ";") {
			keys[section+"."+strings.TrimSpace(key)] = strings.TrimSpace(value)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("while reading PgBouncer's configuration: %w", err)
	}
	return keys, nil
}
