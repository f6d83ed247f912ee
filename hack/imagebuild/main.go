// Command imagebuild writes a single-layer-per-input OCI image as a
// docker-archive tarball (what `ctr images import` and `kind load
// image-archive` read), without a Docker engine or a registry. It uses
// go-containerregistry, the library behind crane.
//
//	imagebuild -tag tusk/operator:dev -out operator.tar \
//	    -file bin/tusk:/tusk -user 65532:65532 -entrypoint /tusk
//	imagebuild -tag tusk/postgres:15 -out pg.tar -layer rootfs.tar -user 100:102
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

type options struct {
	tag, out, user, workdir string
	layers, files, env      listFlag
	entrypoint, cmd         listFlag
}

func main() {
	var o options
	flag.StringVar(&o.tag, "tag", "", "image reference to record in the archive, e.g. tusk/operator:dev")
	flag.StringVar(&o.out, "out", "", "path of the docker-archive tarball to write")
	flag.StringVar(&o.user, "user", "", "numeric uid:gid the image runs as (numeric, so runAsNonRoot can verify it)")
	flag.StringVar(&o.workdir, "workdir", "/", "working directory")
	flag.Var(&o.layers, "layer", "an uncompressed tar of a root filesystem to add as a layer (repeatable)")
	flag.Var(&o.files, "file", "HOSTPATH:IMAGEPATH, a file added with its mode, owned by root (repeatable)")
	flag.Var(&o.env, "env", "KEY=VALUE in the image config (repeatable)")
	flag.Var(&o.entrypoint, "entrypoint", "entrypoint element (repeatable)")
	flag.Var(&o.cmd, "cmd", "cmd element (repeatable)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.tag == "" || o.out == "" {
		return errors.New("-tag and -out are required")
	}
	tag, err := name.NewTag(o.tag)
	if err != nil {
		return fmt.Errorf("while parsing tag %q: %w", o.tag, err)
	}
	img, err := buildImage(o)
	if err != nil {
		return err
	}
	tmp := o.out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return fmt.Errorf("while writing %s: %w", o.out, err)
	}
	return os.Rename(tmp, o.out)
}

func buildImage(o options) (v1.Image, error) {
	var layers []v1.Layer
	for _, path := range o.layers {
		l, err := tarball.LayerFromFile(path, tarball.WithCompressionLevel(gzip.BestSpeed))
		if err != nil {
			return nil, fmt.Errorf("while reading layer %s: %w", path, err)
		}
		layers = append(layers, l)
	}
	if len(o.files) > 0 {
		l, err := filesLayer(o.files)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, fmt.Errorf("while adding layers: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("while reading the image config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.User = o.user
	cfg.Config.WorkingDir = o.workdir
	cfg.Config.Env = o.env
	cfg.Config.Entrypoint = o.entrypoint
	cfg.Config.Cmd = o.cmd
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("while writing the image config: %w", err)
	}
	return img, nil
}

// filesLayer makes one layer holding the given host files (and their parent
// directories), owned by root, so the image needs no base.
func filesLayer(specs []string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, spec := range specs {
		host, dest, ok := strings.Cut(spec, ":")
		if !ok || !strings.HasPrefix(dest, "/") {
			return nil, fmt.Errorf("-file %q: want HOSTPATH:/IMAGEPATH", spec)
		}
		if err := addDirs(tw, dirs, dest); err != nil {
			return nil, err
		}
		if err := addFile(tw, host, dest); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("while closing the files layer: %w", err)
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}

func addDirs(tw *tar.Writer, seen map[string]bool, dest string) error {
	parts := strings.Split(strings.Trim(dest, "/"), "/")
	for i := 1; i < len(parts); i++ {
		dir := strings.Join(parts[:i], "/") + "/"
		if seen[dir] {
			continue
		}
		seen[dir] = true
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("while adding directory %s: %w", dir, err)
		}
	}
	return nil
}

func addFile(tw *tar.Writer, host, dest string) error {
	f, err := os.Open(host) // #nosec G304 -- the path is the caller's argument
	if err != nil {
		return fmt.Errorf("while opening %s: %w", host, err)
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("while reading %s: %w", host, err)
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(dest, "/"),
		Mode:     int64(st.Mode().Perm()),
		Size:     st.Size(),
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("while adding %s: %w", dest, err)
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("while copying %s: %w", host, err)
	}
	return nil
}
