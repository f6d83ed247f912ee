package basebackup

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// growPipe makes the pipe r reads from hold pipeSize bytes, when r is a
// pipe and the system allows it; the backup works without it, only slower.
func growPipe(r io.Reader) {
	f, ok := r.(*os.File)
	if !ok {
		return
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize)
	})
}
