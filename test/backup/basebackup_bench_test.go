//go:build integration

package backup

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/testenv"
	"tusk.dev/tusk/internal/walarchive"
)

// BenchmarkBaseBackup compares `tusk instance backup` (pg_basebackup's tar
// stream checked against the manifest, compressed with zstd and uploaded
// to MinIO on loopback) with `pg_basebackup -Ft` writing a local tar of the
// same database, and prints both throughputs (MB/s of the uncompressed tar)
// and their ratio. Both run with -X none and a fast checkpoint, on a
// pgbench database of about 300 MB. It also times basebackup.Backup called
// in this process, as the instance manager runs it for a PostgresBackup:
// the same work without starting the tusk binary.
func BenchmarkBaseBackup(b *testing.B) {
	s3 := testenv.StartS3(b, testenv.S3Options{})
	dir := workDir(b)
	cfg := archiveConfig(b, dir, s3, nil)
	primary := archivingPrimary(b, dir, cfg)
	primary.connect()
	pgTool(b, "pgbench", "-i", "-s", "20", "-q", "-h", dir, "-p", fmt.Sprint(primary.port), "-U", "postgres", "postgres")
	store := benchStore(b, cfg)
	conn := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", dir, primary.port)
	var local, tusked, inProcess time.Duration
	var size int64
	b.ResetTimer()
	for i := range b.N {
		out := filepath.Join(dir, fmt.Sprintf("local-%d", i))
		start := time.Now()
		pgTool(b, "pg_basebackup", "-h", dir, "-p", fmt.Sprint(primary.port), "-U", "postgres",
			"-Ft", "-D", out, "-X", "none", "-c", "fast")
		local += time.Since(start)
		b.StopTimer()
		st, err := os.Stat(filepath.Join(out, "base.tar"))
		if err != nil {
			b.Fatal(err)
		}
		_ = os.RemoveAll(out)
		b.StartTimer()
		start = time.Now()
		rec := takeBackup(b, cfg, dir, primary, fmt.Sprintf("bench-%d", i))
		tusked += time.Since(start)
		if rec.Size < st.Size() {
			b.Fatalf("tusk's tar is %d bytes, pg_basebackup's %d", rec.Size, st.Size())
		}
		size += rec.Size
		start = time.Now()
		if _, err := basebackup.Backup(b.Context(), basebackup.Options{Name: fmt.Sprintf("bench-in-process-%d", i),
			BinDir: pgBinDir, ConnString: conn, Store: store}); err != nil {
			b.Fatal(err)
		}
		inProcess += time.Since(start)
	}
	mbps := func(d time.Duration) float64 { return float64(size) / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(local), "pg_basebackup-MB/s")
	b.ReportMetric(mbps(tusked), "tusk-MB/s")
	b.ReportMetric(local.Seconds()/tusked.Seconds(), "tusk/pg_basebackup")
	b.ReportMetric(mbps(inProcess), "in-process-MB/s")
	b.ReportMetric(local.Seconds()/inProcess.Seconds(), "in-process/pg_basebackup")
	b.ReportMetric(float64(size/int64(b.N))/1e6, "MB/backup")
}

// benchStore opens the location the configuration at cfg names.
func benchStore(b *testing.B, cfg string) *objectstore.Store {
	b.Helper()
	c, err := walarchive.LoadConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	store, err := objectstore.New(c.ObjectStore)
	if err != nil {
		b.Fatal(err)
	}
	return store
}
