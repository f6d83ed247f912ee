package basebackup

import (
	"archive/tar"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// sink receives what a backup's tar stream holds, once checked to be a
// safe relative path; the backup side discards it, the restore side
// writes it out.
type sink interface {
	dir(name string) error
	// file must read r to its end.
	file(name string, mode int64, r io.Reader) error
}

// discard is the sink that keeps nothing.
type discard struct{}

func (discard) dir(string) error { return nil }
func (discard) file(_ string, _ int64, r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}

// checkTar reads a base backup's tar stream to its end, handing every
// entry to s and computing each file's checksum with algorithm, then
// checks the files against the manifest the stream ends with, which it
// returns. Entries other than files and directories (the symbolic links
// of tablespaces) are refused.
func checkTar(r io.Reader, algorithm string, s sink) (*Manifest, error) {
	tr := tar.NewReader(r)
	files := map[string]fileSum{}
	var manifest []byte
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("while reading the backup's tar stream: %w", err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return nil, err
		}
		switch {
		case hdr.Typeflag == tar.TypeDir:
			err = s.dir(name)
		case hdr.Typeflag != tar.TypeReg:
			return nil, fmt.Errorf("the backup holds %s, which is neither a file nor a directory (type %q): "+
				"tablespaces other than the default are not supported", hdr.Name, hdr.Typeflag)
		case name == ManifestName:
			manifest, err = readManifest(tr, s, hdr.Mode)
		default:
			files[name], err = sumFile(tr, algorithm, s, name, hdr.Mode)
		}
		if err != nil {
			return nil, err
		}
	}
	// Whatever follows the end-of-archive blocks (padding) is read too, so
	// the caller sees the whole stream.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, fmt.Errorf("while reading the backup's tar stream: %w", err)
	}
	if manifest == nil {
		return nil, fmt.Errorf("%w: the backup's tar stream has no %s", ErrVerification, ManifestName)
	}
	m, err := ParseManifest(manifest)
	if err != nil {
		return nil, err
	}
	return m, m.compare(algorithm, files)
}

// entryName cleans a tar entry's name and refuses one that would leave
// the directory it is extracted into.
func entryName(name string) (string, error) {
	clean := path.Clean(strings.TrimPrefix(name, "./"))
	if clean == "." || path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%w: the backup holds an entry named %q, outside the data directory", ErrVerification, name)
	}
	return clean, nil
}

func sumFile(r io.Reader, algorithm string, s sink, name string, mode int64) (fileSum, error) {
	h, err := newHash(algorithm)
	if err != nil {
		return fileSum{}, err
	}
	cr := &countingReader{r: io.TeeReader(r, h)}
	if err := s.file(name, mode, cr); err != nil {
		return fileSum{}, err
	}
	return fileSum{size: cr.n, checksum: hex.EncodeToString(h.Sum(nil))}, nil
}

func readManifest(r io.Reader, s sink, mode int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("while reading the backup manifest: %w", err)
	}
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("%w: the backup manifest is larger than %d bytes", ErrVerification, maxManifestSize)
	}
	return data, s.file(ManifestName, mode, bytes.NewReader(data))
}

// countingReader counts what passes through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// countingWriter counts what passes through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
