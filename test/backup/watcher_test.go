//go:build integration

package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tusk.dev/tusk/internal/testenv"
	"tusk.dev/tusk/internal/walarchive"
)

// TestWatcher: the instance manager's archiver archives the ready
// segments (only segments), records each one verified in the store,
// forgets records of segments no longer ready, records nothing for a batch
// a Reset overtook, and marks a failure so that archive_command does not
// wait for it.
func TestWatcher(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := workDir(t)
	cfg, err := walarchive.LoadConfig(archiveConfig(t, dir, s3, nil))
	if err != nil {
		t.Fatal(err)
	}
	walDir := fakePGWAL(t, dir)
	names := []string{"000000010000000000000010", "000000010000000000000011", "000000010000000000000012",
		"000000010000000000000013", "000000010000000000000014", "000000010000000000000015"}
	sums := map[string]string{}
	for i, n := range names {
		sums[n] = sha(t, fakeSegment(t, walDir, n, byte(40+i), 8))
		markReady(t, walDir, n)
	}
	writeFile(t, filepath.Join(walDir, "00000002.history"), "1\t0/15000000\tno recovery target specified\n")
	markReady(t, walDir, "00000002.history")

	var mu sync.Mutex
	var failures []error
	var superseded int
	newArchiver := func() (walarchive.Archiver, error) { return walarchive.NewArchiver(cfg) }
	w := &walarchive.Watcher{WALDir: walDir, Parallel: 4, Interval: 20 * time.Millisecond, RetryAfter: 50 * time.Millisecond,
		NewArchiver: func() (walarchive.Archiver, error) {
			mu.Lock()
			defer mu.Unlock()
			return newArchiver()
		},
		Report: func(results []walarchive.AheadResult) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range results {
				if r.Superseded {
					superseded++
				} else if r.Err != nil {
					failures = append(failures, r.Err)
				}
			}
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	spool := func(sub string) []string {
		entries, _ := os.ReadDir(filepath.Join(walDir, "tusk-spool", sub))
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		return got
	}
	waitSpool := func(sub string, want []string) {
		t.Helper()
		testenv.EventuallyEvery(t, waitTimeout, 20*time.Millisecond, func(context.Context) error {
			if got := spool(sub); !slices.Equal(got, want) {
				return fmt.Errorf("spool %s: %v; want %v", sub, got, want)
			}
			return nil
		})
	}

	waitSpool("archived", names)
	for _, n := range names {
		if md, data := rawObject(t, s3, walKey(n)); md["tusk-sha256"] != sums[n] || sha256Hex(data) != sums[n] {
			t.Errorf("%s: metadata %v, content sha256 %s; want %s", n, md, sha256Hex(data), sums[n])
		}
	}
	if objectExists(t, s3, walKey("00000002.history")) {
		t.Error("the Watcher archived a timeline history file; only archive_command archives those")
	}
	if _, err := os.Stat(filepath.Join(walDir, "tusk-spool", "watched")); err != nil {
		t.Errorf("no mark that a Watcher runs: %v", err)
	}

	t.Run("records of segments no longer ready are removed", func(t *testing.T) {
		for _, n := range names[:2] {
			if err := os.Rename(filepath.Join(walDir, "archive_status", n+".ready"), filepath.Join(walDir, "archive_status", n+".done")); err != nil {
				t.Fatal(err)
			}
		}
		waitSpool("archived", names[2:])
	})

	t.Run("a Reset forgets records, and the segments are recorded again", func(t *testing.T) {
		if err := w.Reset(); err != nil {
			t.Fatal(err)
		}
		waitSpool("archived", names[2:]) // already archived with the same content: recorded again
	})

	t.Run("a batch a Reset overtook records nothing", func(t *testing.T) {
		n := "000000010000000000000016"
		var overtaken int
		mu.Lock()
		newArchiver = func() (walarchive.Archiver, error) {
			overtaken++
			if err := w.Reset(); err != nil { // as if postgres were restarted meanwhile
				return walarchive.Archiver{}, err
			}
			return walarchive.NewArchiver(cfg)
		}
		mu.Unlock()
		fakeSegment(t, walDir, n, 60, 8)
		markReady(t, walDir, n)
		// Not recorded, the segment is archived again by every batch, and
		// every batch is overtaken: after three, none may have left a record.
		testenv.EventuallyEvery(t, waitTimeout, 20*time.Millisecond, func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if overtaken < 3 || superseded < 3 || !objectExists(t, s3, walKey(n)) {
				return errors.New(n + " not archived and reported superseded by three batches yet")
			}
			newArchiver = func() (walarchive.Archiver, error) { return walarchive.NewArchiver(cfg) }
			return nil
		})
		if got := spool("archived"); len(got) != 0 {
			t.Errorf("records after batches overtaken by a Reset: %v", got)
		}
	})

	t.Run("a failure is marked for archive_command", func(t *testing.T) {
		n := "000000010000000000000017"
		fakeSegment(t, walDir, n, 61, 8)
		// Another file under a name already archived: refused, never overwritten.
		fakeSegment(t, walDir, names[2], 62, 8)
		if err := w.Reset(); err != nil {
			t.Fatal(err)
		}
		markReady(t, walDir, n)
		waitSpool("failed", []string{names[2]})
		// The batch reports once all its segments are done.
		testenv.EventuallyEvery(t, waitTimeout, 20*time.Millisecond, func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if !slices.ContainsFunc(failures, func(err error) bool { return errors.Is(err, walarchive.ErrDifferentContent) }) {
				return errors.New("no refusal of different content reported yet")
			}
			return nil
		})
		if md, _ := rawObject(t, s3, walKey(names[2])); md["tusk-sha256"] != sums[names[2]] {
			t.Errorf("the archived %s was overwritten: %v", names[2], md)
		}
		if slices.Contains(spool("archived"), names[2]) {
			t.Errorf("%s is recorded as archived", names[2])
		}
	})
}

// TestCatchUp: after a promotion onto timeline 2, the segments of timeline
// 1 up to its end (00000002.history says where) that the archive lacks are
// archived; those it holds are left alone, even with other content; a
// timeline 1 segment past the end (a recycled file under a future name)
// and segments of timeline 2 are not touched.
func TestCatchUp(t *testing.T) {
	s3 := testenv.StartS3(t, testenv.S3Options{})
	dir := workDir(t)
	cfg, err := walarchive.LoadConfig(archiveConfig(t, dir, s3, nil))
	if err != nil {
		t.Fatal(err)
	}
	a, err := walarchive.NewArchiver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	walDir := fakePGWAL(t, dir)
	// Timeline 1 ended at 0/14000000: segments 0x10 to 0x13 are its history.
	writeFile(t, filepath.Join(walDir, "00000002.history"), "1\t0/14000000\tno recovery target specified\n")
	missing := []string{"000000010000000000000010", "000000010000000000000012", "000000010000000000000013"}
	present := "000000010000000000000011"
	beyond := []string{"000000010000000000000014", "000000010000000000000018", "000000020000000000000014"}
	for i, n := range append(append(slices.Clone(missing), present), beyond...) {
		fakeSegment(t, walDir, n, byte(70+i), 8)
	}
	// The store holds the old primary's copy of present, with other bytes.
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	otherSum := sha(t, fakeSegment(t, other, present, 99, 8))
	if _, err := a.Archive(context.Background(), filepath.Join(other, present)); err != nil {
		t.Fatal(err)
	}

	res, err := walarchive.CatchUp(context.Background(), a, walDir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Archived, missing) || res.Present != 1 || len(res.Skipped) != 0 {
		t.Errorf("CatchUp: archived %v, present %d, skipped %v; want %v, 1, none", res.Archived, res.Present, res.Skipped, missing)
	}
	for _, n := range missing {
		if md, data := rawObject(t, s3, walKey(n)); md["tusk-sha256"] != sha(t, filepath.Join(walDir, n)) || sha256Hex(data) != md["tusk-sha256"] {
			t.Errorf("%s: metadata %v, content sha256 %s", n, md, sha256Hex(data))
		}
	}
	if md, _ := rawObject(t, s3, walKey(present)); md["tusk-sha256"] != otherSum {
		t.Errorf("the old primary's copy of %s was replaced: %v", present, md)
	}
	for _, n := range beyond {
		if objectExists(t, s3, walKey(n)) {
			t.Errorf("%s, not in timeline 2's history, was archived", n)
		}
	}

	t.Run("without the history file", func(t *testing.T) {
		if _, err := walarchive.CatchUp(context.Background(), a, walDir, 3); err == nil || !strings.Contains(err.Error(), "timeline 3's history") {
			t.Errorf("CatchUp onto timeline 3 without 00000003.history: %v; want an error naming it", err)
		}
	})
}
