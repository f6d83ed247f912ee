package instance

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"tusk.dev/tusk/internal/instanceapi"
)

// RoleFromLabels reads the pod's labels, as the downward API writes them
// into a file (`key="value"` lines, values Go-quoted), and returns the role
// in instanceapi.LabelRole. The operator keeps that label on the role it
// wants, so a container that restarts after a switchover starts as what it
// is now, not as what it was created as. found is false when the file does
// not name a role.
func RoleFromLabels(path string) (role instanceapi.Role, found bool, err error) {
	f, err := os.Open(path) //nolint:gosec // the downward API file named on the command line
	if err != nil {
		return "", false, fmt.Errorf("while reading the pod's labels: %w", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, quoted, ok := strings.Cut(sc.Text(), "=")
		if !ok || key != instanceapi.LabelRole {
			continue
		}
		value, err := strconv.Unquote(quoted)
		if err != nil {
			return "", false, fmt.Errorf("while reading label %s: %w", key, err)
		}
		role = instanceapi.Role(value)
		if role != instanceapi.RolePrimary && role != instanceapi.RoleReplica {
			return "", false, fmt.Errorf("label %s is %q, neither primary nor replica", key, value)
		}
		return role, true, nil
	}
	return "", false, errors.Join(sc.Err())
}
