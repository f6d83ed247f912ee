package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/term"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"tusk.dev/tusk/internal/instanceapi"
)

// ExitCodeError ends a command with Code as the process's exit code, after
// the program it ran (psql) has said what went wrong.
type ExitCodeError struct{ Code int }

func (e *ExitCodeError) Error() string { return "psql exited with code " + strconv.Itoa(e.Code) }

// readPassword reads l's password from its Secret, with the user's own
// credentials, and returns it with the newline that ends it on psql's
// standard input. It is never printed.
func readPassword(ctx context.Context, cl client.Client, ns string, l login) ([]byte, error) {
	s := &corev1.Secret{}
	err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: l.secret}, s)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("the Secret %s with the password of %s is not in namespace %s", l.secret, l.role, ns)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("cannot read the Secret %s with the password of %s: %w (psql needs get on that Secret in namespace %s)", l.secret, l.role, err, ns)
	case err != nil:
		return nil, fmt.Errorf("while reading the Secret %s: %w", l.secret, err)
	}
	return passwordLine(s, l.role)
}

// passwordLine is the Secret's password as Tusk reads it (without the
// line breaks that end it), and a newline: one line for the shell's read.
func passwordLine(s *corev1.Secret, role string) ([]byte, error) {
	if u := string(s.Data[corev1.BasicAuthUsernameKey]); u != "" && u != role {
		return nil, fmt.Errorf("the Secret %s holds the password of %q, not of %q", s.Name, u, role)
	}
	password := instanceapi.Password(s.Data[passwordKey])
	switch {
	case password == "":
		return nil, fmt.Errorf("the Secret %s has no %q key, or it is empty", s.Name, passwordKey)
	case bytes.ContainsAny([]byte(password), "\n\x00"):
		return nil, fmt.Errorf("the password in the Secret %s holds a line break or a NUL byte: psql cannot be given it on one line", s.Name)
	}
	return []byte(password + "\n"), nil
}

// readyLine is what psqlScript prints once it waits for the password, its
// terminal (if any) no longer echoing.
const readyLine = "tusk-psql: ready for the password\n"

// exitNoRawTerminal is psqlScript's exit code when it cannot stop its
// terminal from echoing: the password is then not sent.
const exitNoRawTerminal = 97

// psqlScript reads the password from its first line of standard input and
// runs psql with it in PGPASSWORD. On a terminal, echo is off while the
// line is read (and the line discipline raw, so no byte of the password is
// taken for a control character); the plugin sends the line only after
// readyLine, so the terminal never echoes it back.
//
// PGPASSWORD is in the environment of psql alone, which only processes of
// the same user in the container can read (/proc/<pid>/environ): whoever
// may run them may exec in the pod, and so read the mounted credential
// Secrets anyway. It never appears in a command line, the pod's spec or a
// log. A passfile would have to be written to the pod's disk and could
// outlive a session that is cut off; the variable ends with psql.
var psqlScript = `if [ -t 0 ]; then saved=$(stty -g) && stty raw -echo || exit ` + strconv.Itoa(exitNoRawTerminal) + `; fi
printf '%s' '` + readyLine + `'
IFS= read -r PGPASSWORD || exit 1
if [ -t 0 ]; then stty "$saved"; fi
export PGPASSWORD
exec psql "$@"`

// psqlCommand is what runs in the pod: psqlScript with the connection in
// libpq's environment variables, which psql's own arguments override.
func psqlCommand(l login, host string, args []string) []string {
	cmd := []string{"env",
		"PGHOST=" + host,
		"PGPORT=" + postgresPort,
		"PGDATABASE=" + l.database,
		"PGUSER=" + l.role,
		"PGSSLMODE=verify-full",
		"PGSSLROOTCERT=" + serverCAPath,
		"PGAPPNAME=" + BinaryName,
		"sh", "-c", psqlScript, "psql",
	}
	return append(cmd, args...)
}

// session runs psql through stream (psqlCommand in the pod) with the
// user's streams attached: a terminal when the user's standard input is
// one (raw, its size followed), the password first on standard input once
// the script is ready for it. An error after that is psql's exit code.
func (po *psqlOptions) session(ctx context.Context, stream func(context.Context, remotecommand.StreamOptions) error, password []byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gate := newReadyGate(po.streams.Out)
	opts := remotecommand.StreamOptions{
		Stdin:  &passwordFirst{password: password, ready: gate.ready, failed: gate.failed, done: ctx.Done(), in: po.streams.In},
		Stdout: gate,
	}
	inFd, tty := term.GetFdInfo(po.streams.In)
	if tty {
		state, err := term.MakeRaw(inFd)
		if err != nil {
			return fmt.Errorf("while setting your terminal to raw mode: %w", err)
		}
		defer func() { _ = term.RestoreTerminal(inFd, state) }()
		sizeFd := inFd
		if outFd, ok := term.GetFdInfo(po.streams.Out); ok {
			sizeFd = outFd
		}
		opts.Tty, opts.TerminalSizeQueue = true, watchSize(ctx, sizeFd)
	} else {
		opts.Stderr = po.streams.ErrOut
	}
	err := stream(ctx, opts)
	gate.flush()
	if err != nil && gate.isReady() {
		if ex, ok := errors.AsType[utilexec.ExitError](err); ok {
			return &ExitCodeError{Code: ex.ExitStatus()}
		}
	}
	return err
}

// sessionError says what ended the session in the pod: psql's exit code,
// or why psql could not run.
func sessionError(err error, pod *corev1.Pod) error {
	if _, ok := errors.AsType[*ExitCodeError](err); ok || err == nil {
		return err
	}
	if ex, ok := errors.AsType[utilexec.ExitError](err); ok {
		if ex.ExitStatus() == exitNoRawTerminal {
			return fmt.Errorf("the terminal in pod %s could not be kept from echoing (stty): the password was not sent", pod.Name)
		}
		return fmt.Errorf("the shell in pod %s failed before psql started: %w", pod.Name, err)
	}
	return fmt.Errorf("while running psql in pod %s: %w", pod.Name, err)
}

// readyGate writes the remote output through, once the script has printed
// readyLine, which it swallows; ready is closed then. Output that is not
// readyLine (an error of the shell) is written through, failed is closed,
// and the password never sent.
type readyGate struct {
	out    io.Writer
	mu     sync.Mutex
	buf    []byte
	state  gateState
	ready  chan struct{}
	failed chan struct{}
}

type gateState int

const (
	gateWaiting gateState = iota
	gateReady
	gateFailed
)

// readyLines are readyLine as the script prints it, and as a terminal
// that still translated its newline would pass it on.
var readyLines = [][]byte{[]byte(readyLine), []byte(strings.TrimSuffix(readyLine, "\n") + "\r\n")}

func newReadyGate(out io.Writer) *readyGate {
	return &readyGate{out: out, ready: make(chan struct{}), failed: make(chan struct{})}
}

func (g *readyGate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != gateWaiting {
		return g.out.Write(p)
	}
	g.buf = append(g.buf, p...)
	for _, line := range readyLines {
		if bytes.HasPrefix(g.buf, line) {
			rest := g.buf[len(line):]
			g.buf, g.state = nil, gateReady
			close(g.ready)
			if _, err := g.out.Write(rest); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	if !slices.ContainsFunc(readyLines, func(line []byte) bool { return bytes.HasPrefix(line, g.buf) }) {
		g.state = gateFailed
		close(g.failed)
		if _, err := g.out.Write(g.buf); err != nil {
			return 0, err
		}
		g.buf = nil
	}
	return len(p), nil
}

// flush writes what is left of a readyLine that never came whole.
func (g *readyGate) flush() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == gateWaiting && len(g.buf) > 0 {
		_, _ = g.out.Write(g.buf)
		g.buf = nil
	}
}

func (g *readyGate) isReady() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state == gateReady
}

// passwordFirst is the remote standard input: the password line once ready
// is closed, then the user's input; nothing if failed or done is closed
// first (the script's read then ends, and so does the session).
type passwordFirst struct {
	password []byte
	sent     int
	ready    <-chan struct{}
	failed   <-chan struct{}
	done     <-chan struct{}
	in       io.Reader
}

func (r *passwordFirst) Read(p []byte) (int, error) {
	if r.sent < len(r.password) {
		select {
		case <-r.ready:
		case <-r.failed:
			return 0, io.EOF
		case <-r.done:
			return 0, io.EOF
		}
		n := copy(p, r.password[r.sent:])
		r.sent += n
		if r.sent == len(r.password) {
			clear(r.password)
		}
		return n, nil
	}
	if r.in == nil {
		return 0, io.EOF
	}
	return r.in.Read(p)
}

// sizeQueue hands remotecommand the terminal's size: first as it is, then
// after each change, until its context ends.
type sizeQueue chan remotecommand.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	size, ok := <-q
	if !ok {
		return nil
	}
	return &size
}

func watchSize(ctx context.Context, fd uintptr) sizeQueue {
	q := make(sizeQueue, 1)
	changes := resizeEvents(ctx)
	go func() {
		defer close(q)
		var last remotecommand.TerminalSize
		for {
			if ws, err := term.GetWinsize(fd); err == nil && ws.Width > 0 && ws.Height > 0 {
				size := remotecommand.TerminalSize{Width: ws.Width, Height: ws.Height}
				if size != last {
					select {
					case q <- size:
						last = size
					case <-ctx.Done():
						return
					}
				}
			}
			select {
			case <-changes:
			case <-ctx.Done():
				return
			}
		}
	}()
	return q
}
