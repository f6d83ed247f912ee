//go:build integration

package upgrade_test

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkUpgrade1GiB prints how long each step of an upgrade from 15 to
// 17 takes here for about 1 GiB of data, in link and in copy mode (make
// bench-upgrade; the figures are in docs/benchmarks.md).
func BenchmarkUpgrade1GiB(b *testing.B) {
	for _, mode := range []string{"link", "copy"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				benchUpgrade(b, mode)
			}
		})
	}
}

func benchUpgrade(b *testing.B, mode string) {
	b.StopTimer()
	pg15, pg17 := newImage(b, 15), newImage(b, 17)
	pg15.initdb(b)
	pg15.server(b, pg15.bin(""), func(sql func(string) string) {
		// About 1 GiB: rows of 100 bytes and an index.
		sql(`CREATE TABLE filler AS SELECT g AS id, repeat(md5(g::text), 3) AS pad FROM generate_series(1, 6000000) g`)
		sql(`CREATE INDEX ON filler (id)`)
		b.Logf("data: %s", sql(`SELECT pg_size_pretty(pg_database_size('postgres'))`))
	})
	copyOldServer(b, pg15, pg17)
	moveData(b, pg15, pg17)
	b.StartTimer()
	for _, step := range []string{"check", "run", "verify", "commit"} {
		start := time.Now()
		if _, err := pg17.upgrade(b, step, "--mode", mode); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), step+"-s")
	}
	b.StopTimer()
	pg17.server(b, pg17.bin(""), func(sql func(string) string) {
		if got := sql(`SELECT count(*) FROM filler`); got != strconv.Itoa(6000000) {
			b.Fatalf("filler holds %s rows after the upgrade", strings.TrimSpace(got))
		}
	})
}
