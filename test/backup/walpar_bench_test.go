//go:build integration

package backup

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tusk.dev/tusk/internal/testenv"
	"tusk.dev/tusk/internal/walarchive"
)

// These benchmarks take minutes each: they measure once per sub-benchmark
// and report the same figures however many times the testing package calls
// them (it calls every benchmark with b.N=1 first, then with -benchtime).
var (
	measuredMu sync.Mutex
	measured   = map[string]map[string]float64{}
)

// measureOnce runs measure the first time a benchmark of this name runs,
// and reports its figures every time.
func measureOnce(b *testing.B, measure func() map[string]float64) {
	measuredMu.Lock()
	figures, ok := measured[b.Name()]
	measuredMu.Unlock()
	if !ok {
		figures = measure()
		measuredMu.Lock()
		measured[b.Name()] = figures
		measuredMu.Unlock()
	}
	for unit, v := range figures {
		b.ReportMetric(v, unit)
	}
}

// envInt reads a positive integer from the environment, or gives def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkArchivingUnderPgbench runs pgbench at full speed (no think
// time, fsync off) for $TUSK_BENCH_PGBENCH_SECONDS (60) on a primary
// archiving through `tusk instance wal-archive --parallel N` to MinIO on
// loopback, and reports the WAL written and archived per second, pg_wal's
// size and the archive backlog (.ready files) at the end and at most, and
// how long the backlog took to drain once pgbench stopped. max_wal_size is
// 256MB: pg_wal stays near it when archiving keeps up, and grows past it
// with the backlog otherwise. The series is logged. Two loads: "tpcb",
// pgbench's own script with 4 clients on scale 10; "bulk", 2 clients
// inserting 2000 rows per statement, which writes WAL as fast as this
// machine can.
func BenchmarkArchivingUnderPgbench(b *testing.B) {
	seconds := envInt("TUSK_BENCH_PGBENCH_SECONDS", 60)
	for _, load := range []string{"tpcb", "bulk"} {
		// parallel 0: the instance manager's way, a Watcher archiving
		// ahead in a long-lived process and archive_command waiting for it.
		for _, parallel := range []int{1, 4, 0} {
			name := fmt.Sprintf("%s/parallel=%d", load, parallel)
			if parallel == 0 {
				name = load + "/watcher"
			}
			b.Run(name, func(b *testing.B) {
				measureOnce(b, func() map[string]float64 { return archiveUnderPgbench(b, load, parallel, seconds) })
			})
		}
	}
}

// archiveCommandFor is the archive_command of a parallel setting; 0 sets
// up what the instance manager does: the spool, and the waiting command
// (watchWAL runs the Watcher).
func archiveCommandFor(b *testing.B, data, cfg string, parallel int) string {
	command := fmt.Sprintf("%s instance wal-archive --config %s --parallel %d %%p", tuskBinary, cfg, max(parallel, 1))
	if parallel > 0 {
		return command
	}
	// The Watcher runs here, as root: the directories it writes into must
	// be the postgres user's, for the command to look into them.
	for _, sub := range []string{"", "archived", "failed"} {
		path := filepath.Join(data, "pg_wal", walarchive.SpoolDirName, sub)
		if err := os.MkdirAll(path, 0o700); err != nil {
			b.Fatal(err)
		}
		chown(b, path)
	}
	return walarchive.WaitingArchiveCommand(command, walarchive.DefaultWaitForWatcher)
}

// watchWAL runs a Watcher on data's pg_wal until the benchmark ends.
func watchWAL(b *testing.B, data, cfgPath string) {
	w := &walarchive.Watcher{WALDir: filepath.Join(data, "pg_wal"),
		NewArchiver: walarchive.ArchiverSource(cfgPath)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	sampled := make(chan struct{})
	go func() { defer close(sampled); sampleRSSPeak(ctx) }()
	b.Cleanup(func() { cancel(); <-done; <-sampled })
}

// rssAnonPeak is the largest growth of this process's anonymous resident
// memory (RssAnon: heap, stacks; not the executable's pages) over its
// value when sampleRSSPeak started.
var rssAnonPeak atomic.Int64

// sampleRSSPeak records in rssAnonPeak every 100 ms until ctx is done.
func sampleRSSPeak(ctx context.Context) {
	base := rssAnon()
	rssAnonPeak.Store(0)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if grown := rssAnon() - base; grown > rssAnonPeak.Load() {
			rssAnonPeak.Store(grown)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// rssAnon is RssAnon from /proc/self/status, in bytes; 0 when unreadable.
func rssAnon() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if value, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// selfCPU is this process's CPU time (user and system): the Watcher's,
// when one runs here.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bulkScript is the "bulk" load's pgbench script.
const bulkScript = "INSERT INTO bulk SELECT g, md5(g::text) FROM generate_series(1, 2000) g;\n"

// pgbenchLoad returns the pgbench arguments of a load, after preparing it.
func pgbenchLoad(b *testing.B, conn *pgx.Conn, dir, load string) []string {
	if load == "tpcb" {
		return []string{"-c", "4", "-j", "2"}
	}
	exec1(b, conn, "CREATE TABLE bulk (id int, payload text)")
	return []string{"-c", "2", "-j", "2", "-f", writeFile(b, filepath.Join(dir, "bulk.sql"), bulkScript)}
}

func archiveUnderPgbench(b *testing.B, load string, parallel, seconds int) map[string]float64 {
	s3 := testenv.StartS3(b, testenv.S3Options{})
	dir := workDir(b)
	cfg := archiveConfig(b, dir, s3, nil)
	data := filepath.Join(dir, "primary")
	pgTool(b, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-N")
	srv := startPostgres(b, "primary", dir, data, map[string]string{
		"archive_mode":    "on",
		"archive_command": archiveCommandFor(b, data, cfg, parallel),
		"max_wal_size":    "256MB",
	})
	if parallel == 0 {
		watchWAL(b, data, cfg)
	}
	conn := srv.connect()
	pgTool(b, "pgbench", "-i", "-s", "10", "-q", "-h", dir, "-p", fmt.Sprint(srv.port), "-U", "postgres", "postgres")
	walDir := filepath.Join(data, "pg_wal")
	if _, err := waitDrained(b, walDir, 5*time.Minute); err != nil {
		b.Fatalf("the archive did not catch up after pgbench -i: %v", err)
	}
	args := pgbenchLoad(b, conn, dir, load)
	startLSN := query1[string](b, conn, "SELECT pg_current_wal_lsn()::text")
	startArchived := query1[int64](b, conn, "SELECT archived_count FROM pg_stat_archiver")
	archiver := query1[int32](b, conn, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'archiver'")
	startCPU := childrenCPU(b, archiver) + selfCPU(b)

	done := make(chan pgbenchResult, 1)
	go func() { done <- runPgbench(dir, srv.port, seconds, args...) }()
	started := time.Now()
	var maxWAL, maxReady int64
	var series []string
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var res pgbenchResult
	for running := true; running; {
		select {
		case res = <-done:
			running = false
		case <-tick.C:
		}
		size, ready := walDirState(b, walDir)
		maxWAL, maxReady = max(maxWAL, size), max(maxReady, ready)
		series = append(series, fmt.Sprintf("%.0fs %dMB %d", time.Since(started).Seconds(), size>>20, ready))
	}
	if res.err != nil {
		b.Fatalf("pgbench: %v\n%s", res.err, res.output)
	}
	ran := time.Since(started).Seconds()
	endWAL, endReady := walDirState(b, walDir)
	written := query1[float64](b, conn, "SELECT pg_current_wal_lsn() - $1::pg_lsn", startLSN)
	archived := query1[int64](b, conn, "SELECT archived_count FROM pg_stat_archiver") - startArchived
	failed := query1[int64](b, conn, "SELECT failed_count FROM pg_stat_archiver")
	drain, err := waitDrained(b, walDir, 10*time.Minute)
	if err != nil {
		b.Fatalf("the archive did not catch up after pgbench: %v", err)
	}
	// Every archive_command run of the pgbench period and the drain after
	// it has ended and been waited for: their CPU is in the archiver's.
	drained := query1[int64](b, conn, "SELECT archived_count FROM pg_stat_archiver") - startArchived
	cpuPerSegment := float64((childrenCPU(b, archiver) + selfCPU(b) - startCPU).Milliseconds()) / float64(max(drained, 1))
	b.Logf("%s, parallel=%d: pgbench %.0f tps for %.0f s; elapsed, pg_wal size, .ready files: %s", load, parallel, res.tps, ran, strings.Join(series, ", "))
	figures := map[string]float64{
		"tps":               res.tps,
		"WAL-written-MB/s":  written / 1e6 / ran,
		"WAL-archived-MB/s": float64(archived) * segmentSize / 1e6 / ran,
		"pg_wal-end-MB":     float64(endWAL >> 20),
		"pg_wal-max-MB":     float64(maxWAL >> 20),
		"ready-end":         float64(endReady),
		"ready-max":         float64(maxReady),
		"drain-s":           drain.Seconds(),
		"archive-failures":  float64(failed),
		"cpu-ms/segment":    cpuPerSegment,
	}
	if parallel == 0 {
		// What archiving costs the instance manager in memory, as near as
		// this process shows it: the growth of its anonymous memory.
		figures["watcher-rss-anon-peak-MB"] = float64(rssAnonPeak.Load()) / (1 << 20)
	}
	return figures
}

// childrenCPU is the CPU time (user and system) of the ended children of
// process pid that it waited for: for PostgreSQL's archiver, the
// archive_command runs (the shell and the tusk it starts).
func childrenCPU(b *testing.B, pid int32) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses:
	// cutime and cstime are the 16th and 17th fields of the line.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	var ticks int64
	for _, f := range fields[13:15] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatalf("reading /proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is the unit of /proc's times (USER_HZ), 100 on Linux.
const clockTicks = 100

type pgbenchResult struct {
	tps    float64
	output string
	err    error
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+)`)

// runPgbench runs pgbench with args (the TPC-B-like script with 4 clients
// when none) for seconds.
func runPgbench(dir string, port, seconds int, args ...string) pgbenchResult {
	if len(args) == 0 {
		args = []string{"-c", "4", "-j", "2"}
	}
	args = append(append([]string{"-n", "-T", fmt.Sprint(seconds)}, args...),
		"-h", dir, "-p", fmt.Sprint(port), "-U", "postgres", "postgres")
	cmd := exec.Command(filepath.Join(pgBinDir, "pgbench"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pgUser}
	out, err := cmd.CombinedOutput()
	res := pgbenchResult{output: string(out), err: err}
	if m := tpsLine.FindStringSubmatch(string(out)); m != nil {
		res.tps, _ = strconv.ParseFloat(m[1], 64)
	} else if err == nil {
		res.err = fmt.Errorf("no tps in pgbench's output")
	}
	return res
}

// walDirState is the total size of the files in pg_wal and the number of
// files waiting to be archived.
func walDirState(b *testing.B, walDir string) (size, ready int64) {
	b.Helper()
	entries, err := os.ReadDir(walDir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			size += info.Size()
		}
	}
	status, err := os.ReadDir(filepath.Join(walDir, "archive_status"))
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range status {
		if strings.HasSuffix(e.Name(), ".ready") {
			ready++
		}
	}
	return size, ready
}

// waitDrained waits until no file waits to be archived and says how long
// that took.
func waitDrained(b *testing.B, walDir string, limit time.Duration) (time.Duration, error) {
	b.Helper()
	start := time.Now()
	for {
		_, ready := walDirState(b, walDir)
		if ready == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			return 0, fmt.Errorf("%d files still waiting after %s", ready, limit)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// BenchmarkRecovery measures what a user's recovery takes for a database of
// about 1 GiB (pgbench -i -s $TUSK_BENCH_RECOVERY_SCALE, 70) plus about
// $TUSK_BENCH_RECOVERY_WAL_MB (1024) MB of WAL written by pgbench after
// its base backup: `tusk instance restore` (the base backup from MinIO
// into a new data directory, with the recovery settings; the instance
// manager's recovery bootstrap runs the same code) and then PostgreSQL
// replaying the archive through `tusk instance wal-restore` until it
// promotes itself. "prefetch" is the restore_command as written (--parallel
// 4, the default); "no-prefetch" appends one with --parallel 1.
func BenchmarkRecovery(b *testing.B) {
	src := recoverySource(b)
	for _, v := range []struct {
		name     string
		parallel int
	}{{"prefetch", 4}, {"no-prefetch", 1}} {
		b.Run(v.name, func(b *testing.B) {
			measureOnce(b, func() map[string]float64 { return recoverOnce(b, src, v.name, v.parallel) })
		})
	}
}

// recoverySourceState is the archive the recovery benchmark restores.
type recoverySourceState struct {
	s3      *testenv.S3
	dir     string
	cfg     string
	backup  string
	dbMB    float64
	walMB   float64
	digest  string // pgbench_history's rows and sum of deltas at the end
	prepare time.Duration
}

var (
	recoverySrcOnce sync.Once
	recoverySrc     *recoverySourceState
)

// recoverySource prepares the archive once for all sub-benchmarks: MinIO
// and the directory live until the benchmark binary exits (the parent
// benchmark's cleanups run after its sub-benchmarks).
func recoverySource(b *testing.B) *recoverySourceState {
	recoverySrcOnce.Do(func() { recoverySrc = prepareRecoverySource(b) })
	if recoverySrc == nil {
		b.Fatal("preparing the recovery benchmark's archive failed earlier")
	}
	return recoverySrc
}

func prepareRecoverySource(b *testing.B) *recoverySourceState {
	started := time.Now()
	st := &recoverySourceState{s3: testenv.StartS3(b, testenv.S3Options{}), dir: workDir(b), backup: "bench-1gib"}
	st.cfg = archiveConfig(b, st.dir, st.s3, nil)
	data := filepath.Join(st.dir, "primary")
	pgTool(b, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-N")
	srv := startPostgres(b, "primary", st.dir, data, map[string]string{
		"archive_mode":    "on",
		"archive_command": tuskBinary + " instance wal-archive --config " + st.cfg + " %p",
		"max_wal_size":    "1GB",
	})
	conn := srv.connect()
	scale := envInt("TUSK_BENCH_RECOVERY_SCALE", 70)
	pgTool(b, "pgbench", "-i", "-s", fmt.Sprint(scale), "-q", "-h", st.dir, "-p", fmt.Sprint(srv.port), "-U", "postgres", "postgres")
	st.dbMB = query1[float64](b, conn, "SELECT pg_database_size('postgres') / 1e6")
	rec := takeBackup(b, st.cfg, st.dir, srv, st.backup)
	wantWAL := float64(envInt("TUSK_BENCH_RECOVERY_WAL_MB", 1024)) * (1 << 20)
	for {
		written := query1[float64](b, conn, "SELECT pg_current_wal_lsn() - $1::pg_lsn", rec.EndLSN.String())
		if written >= wantWAL {
			st.walMB = written / 1e6
			break
		}
		if res := runPgbench(st.dir, srv.port, 15); res.err != nil {
			b.Fatalf("pgbench: %v\n%s", res.err, res.output)
		}
	}
	st.digest = historyDigest(b, conn)
	last := query1[string](b, conn, "SELECT pg_walfile_name(pg_current_wal_lsn())")
	exec1(b, conn, "SELECT pg_switch_wal()")
	waitArchivedB(b, conn, last)
	srv.stop()
	st.prepare = time.Since(started)
	b.Logf("recovery source: database %.0f MB, backup %s (%d MB tar), %.0f MB of WAL after it, prepared in %s",
		st.dbMB, st.backup, rec.Size/1e6, st.walMB, st.prepare.Round(time.Second))
	return st
}

// historyDigest identifies pgbench's writes: rows and the sum of deltas.
func historyDigest(b *testing.B, conn *pgx.Conn) string {
	b.Helper()
	return query1[string](b, conn, "SELECT count(*) || ' rows, sum ' || coalesce(sum(delta), 0) FROM pgbench_history")
}

// waitArchivedB is waitArchived for a benchmark.
func waitArchivedB(b *testing.B, conn *pgx.Conn, segment string) {
	b.Helper()
	testenv.EventuallyEvery(b, 10*time.Minute, 500*time.Millisecond, func(ctx context.Context) error {
		var archived string
		if err := conn.QueryRow(ctx, "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver").Scan(&archived); err != nil {
			return err
		}
		if archived < segment {
			return fmt.Errorf("last archived %q, waiting for %s", archived, segment)
		}
		return nil
	})
}

func recoverOnce(b *testing.B, st *recoverySourceState, name string, parallel int) map[string]float64 {
	target := filepath.Join(st.dir, "recovered-"+name)
	start := time.Now()
	if code, out := restore(b, st.cfg, st.backup, target); code != 0 {
		b.Fatalf("tusk instance restore: exit %d: %s", code, out)
	}
	restored := time.Since(start)
	if parallel != 4 {
		auto := filepath.Join(target, "postgresql.auto.conf")
		f, err := os.OpenFile(auto, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		_, err = fmt.Fprintf(f, "restore_command = '%s instance wal-restore --config %s --parallel %d %%f %%p'\n", tuskBinary, st.cfg, parallel)
		_ = f.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	srv := startPostgres(b, name, st.dir, target, map[string]string{"archive_mode": "off"})
	conn := srv.connect()
	waitPromoted(b, conn)
	total := time.Since(start)
	if got := historyDigest(b, conn); got != st.digest {
		b.Fatalf("recovered pgbench_history: %s; the primary had %s", got, st.digest)
	}
	srv.stop()
	_ = os.RemoveAll(target)
	b.Logf("%s: base backup restored in %s, WAL replayed in %s, %s in all (%.0f MB database, %.0f MB of WAL)",
		name, restored.Round(100*time.Millisecond), (total - restored).Round(100*time.Millisecond), total.Round(100*time.Millisecond), st.dbMB, st.walMB)
	return map[string]float64{
		"recovery-s":      total.Seconds(),
		"basebackup-s":    restored.Seconds(),
		"replay-s":        (total - restored).Seconds(),
		"WAL-replay-MB/s": st.walMB / (total - restored).Seconds(),
	}
}
