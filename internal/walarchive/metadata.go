package walarchive

import (
	"errors"
	"fmt"
	"strconv"
)

// Object metadata of an archived WAL file (lowercase, as objectstore
// returns it).
const (
	metaSHA256      = "tusk-sha256"      // hex SHA-256 of the uncompressed file
	metaSize        = "tusk-size"        // size of the uncompressed file in bytes
	metaCompression = "tusk-compression" // "zstd"
)

const compressionZstd = "zstd"

// ErrDifferentContent is wrapped by the error Archive returns when a file of
// the same name but different content is already archived.
var ErrDifferentContent = errors.New("a different file of the same name is already archived")

// Sum identifies a WAL file's content.
type Sum struct {
	SHA256 string // hex
	Size   int64
}

// metadata is what Archive stores with the object.
func (s Sum) metadata() map[string]string {
	return map[string]string{
		metaSHA256:      s.SHA256,
		metaSize:        strconv.FormatInt(s.Size, 10),
		metaCompression: compressionZstd,
	}
}

// sumFromMetadata reads back what metadata stored, refusing objects that
// Archive did not write (or wrote in a format this version does not read).
func sumFromMetadata(md map[string]string) (Sum, error) {
	if c := md[metaCompression]; c != compressionZstd {
		return Sum{}, fmt.Errorf("the object's compression is %q, not %q: it was not written by tusk wal-archive", c, compressionZstd)
	}
	sha := md[metaSHA256]
	size, err := strconv.ParseInt(md[metaSize], 10, 64)
	if len(sha) != 64 || err != nil || size < 0 {
		return Sum{}, fmt.Errorf("the object has no valid checksum and size in its metadata (%s=%q, %s=%q): it was not written by tusk wal-archive",
			metaSHA256, sha, metaSize, md[metaSize])
	}
	return Sum{SHA256: sha, Size: size}, nil
}

// alreadyArchived decides what to do about an object found under the key a
// file is archived to: nothing (true) when it holds the same content; an
// error wrapping ErrDifferentContent when it holds other content, since
// overwriting it could destroy the only copy of WAL another timeline or
// cluster needs.
func alreadyArchived(local Sum, existing map[string]string) (bool, error) {
	stored, err := sumFromMetadata(existing)
	if err != nil {
		return false, fmt.Errorf("%w (%w)", ErrDifferentContent, err)
	}
	if stored != local {
		return false, fmt.Errorf("%w: archived sha256 %s (%d bytes), local sha256 %s (%d bytes)",
			ErrDifferentContent, stored.SHA256, stored.Size, local.SHA256, local.Size)
	}
	return true, nil
}
