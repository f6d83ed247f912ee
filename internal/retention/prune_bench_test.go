//go:build integration

package retention

import (
	"context"
	"fmt"
	"testing"

	"tusk.dev/tusk/internal/postgres"
	"tusk.dev/tusk/internal/testenv"
)

// BenchmarkPruneWAL is retention deleting 200 archived segments (of 400)
// from MinIO on loopback: the listing of wal/ and one DELETE per object.
func BenchmarkPruneWAL(b *testing.B) {
	const total, doomed = 400, 200
	s3 := testenv.StartS3(b, testenv.S3Options{})
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		store := storeAt(b, s3, fmt.Sprintf("bench%d", i))
		for n := range total {
			putWAL(b, store, fmt.Sprintf("%08X%08X%08X", 1, n/256, n%256))
		}
		plan := Plan{WAL: &WALBoundary{Before: doomed, MaxTimeline: 1, SegmentSize: postgres.DefaultWALSegmentSize}}
		b.StartTimer()
		res, err := Prune(ctx, store, plan)
		if err != nil || res.WALObjects != doomed {
			b.Fatalf("pruned %d: %v", res.WALObjects, err)
		}
	}
	b.ReportMetric(float64(doomed*b.N)/b.Elapsed().Seconds(), "objects/s")
}
