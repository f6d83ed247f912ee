//go:build !windows

package plugin

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// resizeEvents signals each change of the terminal's size (SIGWINCH)
// until ctx ends.
func resizeEvents(ctx context.Context) <-chan os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	go func() {
		<-ctx.Done()
		signal.Stop(ch)
	}()
	return ch
}
