package plugin

import (
	"context"
	"time"
)

// resizeEvents ticks four times a second until ctx ends: Windows has no
// signal for a resized console, so its size is compared on every tick
// (as kubectl does).
func resizeEvents(ctx context.Context) <-chan time.Time {
	t := time.NewTicker(250 * time.Millisecond)
	go func() {
		<-ctx.Done()
		t.Stop()
	}()
	return t.C
}
