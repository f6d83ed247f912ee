//go:build integration

package backup

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"tusk.dev/tusk/internal/testenv"
	"tusk.dev/tusk/internal/walarchive"
)

// BenchmarkArchiveSegment measures what PostgreSQL waits for per WAL
// segment: one run of `tusk instance wal-archive` (process start,
// configuration, checksum, zstd, upload to MinIO on loopback) for a 16 MiB
// segment, reported per segment and as MB/s of WAL. "real-wal" is a segment
// full of INSERTs written by PostgreSQL; "random" does not compress, the
// worst case.
func BenchmarkArchiveSegment(b *testing.B) {
	s3 := testenv.StartS3(b, testenv.S3Options{})
	dir := workDir(b)
	cfg := archiveConfig(b, dir, s3, nil)
	segments := map[string]string{"real-wal": realSegment(b, dir), "random": fakeSegment(b, dir, "random", 3, 256)}
	next := 0 // the number of the next segment: each run archives a new name
	for _, name := range []string{"real-wal", "random"} {
		b.Run(name, func(b *testing.B) {
			content, err := os.ReadFile(segments[name])
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(segmentSize)
			var compressed int64
			var cpu time.Duration
			for range b.N {
				b.StopTimer()
				seg := filepath.Join(dir, fmt.Sprintf("%08X%08X%08X", 1, next/256, next%256))
				next++
				writeFile(b, seg, string(content))
				b.StartTimer()
				code, out, used := tuskCPU(b, "instance", "wal-archive", "--config", cfg, seg)
				b.StopTimer()
				if code != 0 {
					b.Fatalf("wal-archive: exit %d: %s", code, out)
				}
				cpu += used
				compressed += objectSize(b, s3, filepath.Base(seg))
				_ = os.Remove(seg)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/segment")
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/segment")
			b.ReportMetric(float64(compressed)/float64(int64(b.N)*segmentSize), "compressed-ratio")
		})
	}
}

// BenchmarkArchiveInProcess measures the archiving work of one segment
// without the process around it: walarchive.Archiver.Archive called in the
// benchmark's process, as `tusk instance wal-archive` calls it, on a new
// name each time. It shows what the process start costs (the difference
// with BenchmarkArchiveSegment), and it is the one to profile
// (-cpuprofile) for the archiving work itself. cpu-ms/segment is this
// process's CPU time (MinIO's is not in it).
func BenchmarkArchiveInProcess(b *testing.B) {
	s3 := testenv.StartS3(b, testenv.S3Options{})
	dir := workDir(b)
	cfg, err := walarchive.LoadConfig(archiveConfig(b, dir, s3, nil))
	if err != nil {
		b.Fatal(err)
	}
	a, err := walarchive.NewArchiver(cfg)
	if err != nil {
		b.Fatal(err)
	}
	segments := map[string]string{"real-wal": realSegment(b, dir), "random": fakeSegment(b, dir, "random", 3, 256)}
	next := 0
	for _, name := range []string{"real-wal", "random"} {
		b.Run(name, func(b *testing.B) {
			content, err := os.ReadFile(segments[name])
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(segmentSize)
			var cpu time.Duration
			for range b.N {
				b.StopTimer()
				seg := filepath.Join(dir, fmt.Sprintf("%08X%08X%08X", 1, next/256, next%256))
				next++
				writeFile(b, seg, string(content))
				before := processCPU(b)
				b.StartTimer()
				_, err := a.Archive(b.Context(), seg)
				b.StopTimer()
				cpu += processCPU(b) - before
				if err != nil {
					b.Fatal(err)
				}
				_ = os.Remove(seg)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/segment")
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/segment")
		})
	}
}

// processCPU is the CPU time (user and system) this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRestoreSegment measures one run of `tusk instance wal-restore`
// for an archived 16 MiB segment of real WAL.
func BenchmarkRestoreSegment(b *testing.B) {
	s3 := testenv.StartS3(b, testenv.S3Options{})
	dir := workDir(b)
	cfg := archiveConfig(b, dir, s3, nil)
	seg := realSegment(b, dir)
	name := "000000010000000000000001"
	if err := os.Rename(seg, filepath.Join(dir, name)); err != nil {
		b.Fatal(err)
	}
	if code, out := tusk(b, "instance", "wal-archive", "--config", cfg, filepath.Join(dir, name)); code != 0 {
		b.Fatalf("wal-archive: exit %d: %s", code, out)
	}
	b.SetBytes(segmentSize)
	b.ResetTimer()
	for range b.N {
		dest := filepath.Join(dir, "RECOVERYXLOG")
		if code, out := tusk(b, "instance", "wal-restore", "--config", cfg, name, dest); code != 0 {
			b.Fatalf("wal-restore: exit %d: %s", code, out)
		}
		b.StopTimer()
		_ = os.Remove(dest)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/segment")
}

// realSegment makes PostgreSQL write a few segments of INSERTs and copies
// one that is full of them (not the one in progress) to dir.
func realSegment(b *testing.B, dir string) string {
	b.Helper()
	data := filepath.Join(dir, "bench-data")
	pgTool(b, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-N")
	srv := startPostgres(b, "bench", dir, data, map[string]string{"checkpoint_timeout": "1h", "max_wal_size": "1GB"})
	conn := srv.connect()
	exec1(b, conn, "CREATE TABLE items (id int PRIMARY KEY, payload text, at timestamptz DEFAULT now())")
	exec1(b, conn, "INSERT INTO items SELECT g, md5(g::text) FROM generate_series(1, 300000) g")
	full := query1[string](b, conn, "SELECT pg_walfile_name(pg_current_wal_lsn() - 16777216)")
	content, err := os.ReadFile(filepath.Join(data, "pg_wal", full))
	if err != nil {
		b.Fatal(err)
	}
	srv.stop()
	return writeFile(b, filepath.Join(dir, "real-wal"), string(content))
}

// objectSize is the stored (compressed) size of an archived segment.
func objectSize(b *testing.B, s3 *testenv.S3, name string) int64 {
	b.Helper()
	info, err := s3.Client().StatObject(b.Context(), s3.Bucket, cluster+"/wal/"+name[:16]+"/"+name+".zst", minio.StatObjectOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return info.Size
}
