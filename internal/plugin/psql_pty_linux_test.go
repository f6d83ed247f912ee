package plugin

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPty opens a pseudo-terminal: its controller and the terminal.
func openPty(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { _ = ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tty.Close() })
	return ptmx, tty
}

// The script on a terminal, as in a pod with kubectl's -t: once it says it
// is ready, the terminal echoes nothing of the password and takes none of
// its bytes for a control character (^C, ^U, ^D); psql then gets the
// terminal back as it was, echo on.
func TestPsqlScriptOnATerminalEchoesNoPassword(t *testing.T) {
	if _, err := exec.LookPath("stty"); err != nil {
		t.Skip("no stty here")
	}
	dir := t.TempDir()
	fake := "#!/bin/sh\nstty -a | grep -q -- ' echo ' && echo psql-sees-echo-on\n" +
		"[ \"$PGPASSWORD\" = \"$(printf 'p\\003a\\025ss w\\004rd')\" ] && echo psql-has-the-password\nexit 4\n"
	if err := os.WriteFile(filepath.Join(dir, "psql"), []byte(fake), 0o700); err != nil {
		t.Fatal(err)
	}
	ptmx, tty := openPty(t)
	args := psqlCommand(login{role: "app", database: "app"}, "localhost", nil)
	cmd := exec.Command(args[0], args[1:]...) // #nosec G204 -- the command under test
	cmd.Env = []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready, output := make(chan struct{}), make(chan []byte, 1)
	go func() {
		var out bytes.Buffer
		buf := make([]byte, 1024)
		for {
			n, err := ptmx.Read(buf)
			out.Write(buf[:n])
			if out.String() == readyLine {
				close(ready)
			}
			if err != nil {
				output <- out.Bytes()
				return
			}
		}
	}()
	select {
	case <-ready:
	case out := <-output:
		t.Fatalf("the script ended before it was ready: %v; it printed %q", cmd.Wait(), out)
	case <-time.After(10 * time.Second):
		t.Fatal("the script never said it was ready")
	}
	const password = "p\x03a\x15ss w\x04rd"
	if _, err := ptmx.Write([]byte(password + "\n")); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	_ = tty.Close()
	out := string(<-output)
	if ex, ok := errors.AsType[*exec.ExitError](err); !ok || ex.ExitCode() != 4 {
		t.Fatalf("the script: %v, want psql's exit code 4; it printed %q", err, out)
	}
	if strings.Contains(out, "ss w") {
		t.Errorf("the terminal echoed the password: %q", out)
	}
	for _, want := range []string{"psql-sees-echo-on", "psql-has-the-password"} {
		if !strings.Contains(out, want) {
			t.Errorf("the script printed %q, without %s", out, want)
		}
	}
}
