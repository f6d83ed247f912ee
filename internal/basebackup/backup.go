package basebackup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
)

const (
	compressionZstd = "zstd"
	// checksumAlgorithm is what pg_basebackup is asked to checksum files
	// with: its default, and cheap enough not to slow the backup down.
	checksumAlgorithm = "CRC32C"
	// minVersionNum is PostgreSQL 13, the first with backup manifests.
	minVersionNum = 130000
)

// Runner starts and waits for a child process. The instance manager, PID
// 1 of its pod, passes its reaper; plain exec otherwise.
type Runner interface {
	Start(cmd *exec.Cmd) error
	Wait(cmd *exec.Cmd) error
}

type execRunner struct{}

func (execRunner) Start(cmd *exec.Cmd) error { return cmd.Start() } //nolint:forbidigo // the runner of a process without a reaper
func (execRunner) Wait(cmd *exec.Cmd) error  { return cmd.Wait() }

// Options say what to back up where.
type Options struct {
	// Name is the backup's name, unique in the cluster's location.
	Name string
	// BinDir holds pg_basebackup.
	BinDir string
	// ConnString is a libpq connection string to the instance, for
	// pg_basebackup (a replication connection) and a few queries.
	ConnString string
	// Store is the cluster's location.
	Store *objectstore.Store
	// Runner runs pg_basebackup; plain exec when nil.
	Runner Runner
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// BeforeRecord, when set, runs once the data object is complete and
	// verified, before the record is written; an error fails the backup
	// (and removes the data object). A backup from a standby waits there
	// for the WAL up to EndLSN to be archived: PostgreSQL does not wait
	// for that on a standby unless archive_mode is always.
	BeforeRecord func(ctx context.Context, rec *Record) error
}

// server is what Backup asks the instance before the backup.
type server struct {
	version          string
	versionNum       int
	systemIdentifier string
	walSegmentSize   uint64
	// dataSize is the size of the databases, about the tar stream's.
	dataSize int64
}

// Backup takes a base backup of the instance into the store and returns
// its record. Nothing is left in the store when it fails.
func Backup(ctx context.Context, o Options) (*Record, error) {
	if err := ValidateName(o.Name); err != nil {
		return nil, err
	}
	if o.Runner == nil {
		o.Runner = execRunner{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := refuseExisting(ctx, o.Store, o.Name); err != nil {
		return nil, err
	}
	srv, err := inspect(ctx, o.ConnString)
	if err != nil {
		return nil, err
	}
	rec := &Record{Format: RecordFormat, Name: o.Name, StartTime: o.Now().UTC(),
		PostgreSQLVersion: srv.version, PostgreSQLVersionNum: srv.versionNum, SystemIdentifier: srv.systemIdentifier,
		WALSegmentSize: srv.walSegmentSize, ManifestChecksumAlgorithm: checksumAlgorithm,
		Object: DataObject, Compression: compressionZstd}
	if err := o.stream(ctx, rec, srv.dataSize); err != nil {
		return nil, err
	}
	rec.EndTime = o.Now().UTC()
	if o.BeforeRecord != nil {
		if err := o.BeforeRecord(ctx, rec); err != nil {
			_ = o.Store.Delete(context.WithoutCancel(ctx), DataKey(o.Name))
			return nil, fmt.Errorf("while completing backup %q: %w", o.Name, err)
		}
	}
	if err := rec.save(ctx, o.Store); err != nil {
		_ = o.Store.Delete(context.WithoutCancel(ctx), DataKey(o.Name))
		return nil, fmt.Errorf("while writing the record of backup %q: %w", o.Name, err)
	}
	return rec, nil
}

// refuseExisting fails when anything is stored under the backup's name:
// a backup is never overwritten.
func refuseExisting(ctx context.Context, store *objectstore.Store, name string) error {
	for obj, err := range store.List(ctx, Prefix+name+"/") {
		if err != nil {
			return err
		}
		return fmt.Errorf("refusing to take backup %q: %s%s already exists (backups are never overwritten; choose another name)",
			name, store.Location(), Prefix+name+"/"+obj.Key[len(Prefix+name+"/"):])
	}
	return nil
}

// inspect asks the instance what the record needs, and refuses what the
// backup cannot handle.
func inspect(ctx context.Context, connString string) (server, error) {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return server{}, fmt.Errorf("while connecting to the instance to back up: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var s server
	var spaces []string
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int,
		(SELECT system_identifier::text FROM pg_control_system()),
		(SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size'),
		ARRAY(SELECT spcname::text FROM pg_tablespace WHERE spcname NOT IN ('pg_default', 'pg_global') ORDER BY 1),
		(SELECT sum(pg_database_size(oid))::bigint FROM pg_database)`).
		Scan(&s.version, &s.versionNum, &s.systemIdentifier, &s.walSegmentSize, &spaces, &s.dataSize)
	if err != nil {
		return server{}, fmt.Errorf("while inspecting the instance to back up: %w", err)
	}
	if s.versionNum < minVersionNum {
		return server{}, fmt.Errorf("PostgreSQL %s has no backup manifests: base backups need PostgreSQL 13 or later", s.version)
	}
	if len(spaces) > 0 {
		return server{}, fmt.Errorf("the instance has tablespaces besides the default (%s): base backups of other tablespaces are not supported",
			strings.Join(spaces, ", "))
	}
	return s, nil
}

// stream runs pg_basebackup, and compresses and uploads its tar stream
// while checking it against the manifest at its end. The object is
// completed only when all of that succeeded: otherwise the upload is
// aborted and leaves nothing.
func (o Options) stream(ctx context.Context, rec *Record, sizeHint int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(o.BinDir, "pg_basebackup"), //nolint:gosec // PostgreSQL's own program
		"--dbname="+o.ConnString, "--format=tar", "--pgdata=-", "--wal-method=none", "--checkpoint=fast",
		"--manifest-checksums="+checksumAlgorithm, "--label=tusk "+o.Name, "--no-password")
	cmd.Env = os.Environ()
	stderr := &tailBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	growPipe(stdout)
	if err := o.Runner.Start(cmd); err != nil {
		return fmt.Errorf("while starting pg_basebackup: %w", err)
	}
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	var produceErr error
	wg.Go(func() {
		produceErr = o.produce(stdout, cmd, stderr, pw, rec)
		if produceErr != nil {
			cancel() // stops pg_basebackup if it still runs
		}
	})
	// The compressed stream is smaller than the data, but for a little
	// framing of data that does not compress; the margin covers it and
	// what grows during the backup.
	putErr := o.Store.PutStream(ctx, DataKey(o.Name), pr, map[string]string{"tusk-compression": compressionZstd}, 2*sizeHint)
	if putErr != nil {
		cancel() // no point reading the rest: stop pg_basebackup
	}
	_ = pr.CloseWithError(errors.Join(putErr, errors.New("the upload stopped"))) // unblocks produce when Put gave up
	wg.Wait()
	if produceErr != nil {
		return fmt.Errorf("while taking backup %q: %w", o.Name, produceErr)
	}
	if putErr != nil {
		return fmt.Errorf("while uploading backup %q: %w", o.Name, putErr)
	}
	return nil
}

// produce reads pg_basebackup's output through the checker and into the
// compressor, waits for pg_basebackup, and closes w: cleanly only when
// everything succeeded.
func (o Options) produce(stdout io.Reader, cmd *exec.Cmd, stderr *tailBuffer, w *io.PipeWriter, rec *Record) error {
	err := o.compressChecked(stdout, w, rec)
	if err != nil {
		_, _ = io.Copy(io.Discard, stdout) // lets pg_basebackup finish or fail
	}
	if werr := o.Runner.Wait(cmd); werr != nil && err == nil {
		err = fmt.Errorf("pg_basebackup failed (%w): %s", werr, stderr.String())
	}
	if err != nil {
		_ = w.CloseWithError(err)
		return err
	}
	return w.Close()
}

// compressChecked checks pg_basebackup's output against the manifest
// while the compressor, on its own goroutine, compresses it into w.
func (o Options) compressChecked(stdout io.Reader, w io.Writer, rec *Record) error {
	c, err := startCompressor(w)
	if err != nil {
		return err
	}
	tee := newChunkTee(stdout, c.in, c.free)
	raw := &countingReader{r: tee}
	m, err := checkTar(raw, checksumAlgorithm, discard{})
	if err == nil {
		tee.flush()
	}
	if cerr := c.finish(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	rec.BeginLSN, rec.EndLSN, rec.Timeline = m.span()
	seg, err := postgres.SegmentOf(rec.Timeline, rec.BeginLSN, rec.WALSegmentSize)
	if err != nil {
		return err
	}
	rec.BeginWAL = seg.FileName()
	rec.Size, rec.CompressedSize, rec.Files = raw.n, c.w.n, len(m.Files)
	rec.ManifestChecksum = m.Checksum
	return nil
}

// tailBuffer keeps the end of a program's output for its error message.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 2048

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailSize {
		t.buf = t.buf[len(t.buf)-tailSize:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(strings.Fields(strings.TrimSpace(string(t.buf))), " ")
}
