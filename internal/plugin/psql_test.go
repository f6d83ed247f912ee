package plugin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

func TestSplitPsqlArgs(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		dash     int
		wantName string
		wantArgs []string
		wantErr  bool
	}{
		{args: []string{"orders"}, dash: -1, wantName: "orders", wantArgs: []string{}},
		{args: []string{"orders", "-c", "select 1"}, dash: 1, wantName: "orders", wantArgs: []string{"-c", "select 1"}},
		{args: []string{"orders"}, dash: 1, wantName: "orders", wantArgs: []string{}},
		{args: []string{"orders", "extra"}, dash: -1, wantErr: true},
		{args: []string{"orders", "extra", "-c", "x"}, dash: 2, wantErr: true},
		{args: []string{"-c", "x"}, dash: 0, wantErr: true},
	} {
		name, args, err := splitPsqlArgs(tc.args, tc.dash)
		if (err != nil) != tc.wantErr || name != tc.wantName || (!tc.wantErr && !slices.Equal(args, tc.wantArgs)) {
			t.Errorf("splitPsqlArgs(%q, %d) = %q, %q, %v", tc.args, tc.dash, name, args, err)
		}
	}
}

func TestChooseLogin(t *testing.T) {
	custom := func(c *tuskv1alpha1.PostgresCluster) {
		c.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{InitDB: &tuskv1alpha1.InitDBSpec{
			Owner: "shop", Database: "sales", Secret: &corev1.LocalObjectReference{Name: "shop-login"}}}
	}
	superuser := func(c *tuskv1alpha1.PostgresCluster) { c.Spec.SuperuserAccess = true }
	for _, tc := range []struct {
		name                   string
		edit                   func(c *tuskv1alpha1.PostgresCluster)
		role, secret, database string
		want                   login
		wantErr                string
	}{
		{name: "the owner by default", want: login{role: "app", database: "app", secret: "orders-app"}},
		{name: "the owner named", role: "app", database: "other", want: login{role: "app", database: "other", secret: "orders-app"}},
		{name: "initdb's owner, database and Secret", edit: custom, want: login{role: "shop", database: "sales", secret: "shop-login"}},
		{name: "the owner with another Secret", secret: "mine", want: login{role: "app", database: "app", secret: "mine"}},
		{name: "another role", role: "reporting", secret: "reporting-login", want: login{role: "reporting", database: "app", secret: "reporting-login"}},
		{name: "another role needs --secret", role: "reporting", wantErr: "--role reporting needs --secret"},
		{name: "no superuser over the network", role: "postgres", wantErr: "spec.superuserAccess is false"},
		{name: "no superuser even with a Secret", role: "postgres", secret: "mine", wantErr: "spec.superuserAccess is false"},
		{name: "the superuser", edit: superuser, role: "postgres", want: login{role: "postgres", database: "app", secret: "orders-superuser"}},
		{name: "the superuser's own Secret", edit: func(c *tuskv1alpha1.PostgresCluster) {
			superuser(c)
			c.Spec.SuperuserSecret = &corev1.LocalObjectReference{Name: "root"}
		}, role: "postgres", database: "postgres", want: login{role: "postgres", database: "postgres", secret: "root"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := healthyCluster()
			if tc.edit != nil {
				tc.edit(c)
			}
			got, err := chooseLogin(c, tc.role, tc.secret, tc.database)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("chooseLogin: %+v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("chooseLogin = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func instancePod(name string, role instanceapi.Role, ready bool) corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop",
			Labels: map[string]string{tuskv1alpha1.LabelCluster: "orders", instanceapi.LabelRole: string(role)}},
		Status: corev1.PodStatus{
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "postgres",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
		},
	}
}

func TestChoosePod(t *testing.T) {
	terminating := instancePod("orders-2", instanceapi.RoleReplica, true)
	terminating.DeletionTimestamp = &metav1.Time{}
	stopped := instancePod("orders-2", instanceapi.RoleReplica, true)
	stopped.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
	for _, tc := range []struct {
		name    string
		pods    []corev1.Pod
		replica bool
		want    string
		wantErr string
	}{
		{name: "the primary", pods: []corev1.Pod{
			instancePod("orders-2", instanceapi.RoleReplica, true), instancePod("orders-1", instanceapi.RolePrimary, true),
		}, want: "orders-1"},
		{name: "status.currentPrimary first", pods: []corev1.Pod{
			instancePod("orders-0", instanceapi.RolePrimary, true), instancePod("orders-1", instanceapi.RolePrimary, true),
		}, want: "orders-1"},
		{name: "a primary labelled as such, when status lags", pods: []corev1.Pod{
			instancePod("orders-1", instanceapi.RoleReplica, true), instancePod("orders-2", instanceapi.RolePrimary, true),
		}, want: "orders-2"},
		{name: "no ready primary", pods: []corev1.Pod{
			instancePod("orders-1", instanceapi.RolePrimary, false), instancePod("orders-2", instanceapi.RoleReplica, true),
		}, wantErr: "cluster orders has no ready primary (status.currentPrimary orders-1, phase Healthy)"},
		{name: "a ready replica, by name", replica: true, pods: []corev1.Pod{
			instancePod("orders-1", instanceapi.RolePrimary, true), instancePod("orders-3", instanceapi.RoleReplica, true),
			instancePod("orders-2", instanceapi.RoleReplica, true), instancePod("orders-4", instanceapi.RoleReplica, false),
		}, want: "orders-2"},
		{name: "not a replica on its way out", replica: true, pods: []corev1.Pod{
			terminating, instancePod("orders-3", instanceapi.RoleReplica, true),
		}, want: "orders-3"},
		{name: "not a replica whose postgres is not running", replica: true, pods: []corev1.Pod{stopped},
			wantErr: "cluster orders has no ready replica"},
		{name: "no replica", replica: true, pods: []corev1.Pod{instancePod("orders-1", instanceapi.RolePrimary, true)},
			wantErr: "cluster orders has no ready replica (spec.instances 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := choosePod(healthyCluster(), tc.pods, tc.replica)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("choosePod: %v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.Name != tc.want {
				t.Fatalf("choosePod = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestPsqlHostIsAServiceTheCertificateNames(t *testing.T) {
	c := healthyCluster()
	if got := psqlHost(c, false); got != "orders-rw.shop.svc" {
		t.Errorf("psqlHost = %s", got)
	}
	if got := psqlHost(c, true); got != "orders-ro.shop.svc" {
		t.Errorf("psqlHost(replica) = %s", got)
	}
}

func TestPasswordLine(t *testing.T) {
	secret := func(data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "orders-app"}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	for _, tc := range []struct {
		data    map[string]string
		want    string
		wantErr string
	}{
		{data: map[string]string{"username": "app", "password": "s3cret"}, want: "s3cret\n"},
		{data: map[string]string{"password": "from a file\r\n"}, want: "from a file\n"},
		{data: map[string]string{"password": `back\slash 'quote" $x`}, want: `back\slash 'quote" $x` + "\n"},
		{data: map[string]string{"username": "other", "password": "x"}, wantErr: `holds the password of "other", not of "app"`},
		{data: map[string]string{"username": "app"}, wantErr: `has no "password" key`},
		{data: map[string]string{"password": "two\nlines"}, wantErr: "holds a line break"},
		{data: map[string]string{"password": "nul\x00byte"}, wantErr: "a NUL byte"},
	} {
		got, err := passwordLine(secret(tc.data), "app")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("passwordLine(%q): %v; want an error with %q", tc.data, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), tc.data["password"]) && tc.data["password"] != "" {
				t.Errorf("the error shows the password: %v", err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("passwordLine(%q) = %q, %v; want %q", tc.data, got, err, tc.want)
		}
	}
}

func TestPsqlCommandCarriesNoPassword(t *testing.T) {
	cmd := psqlCommand(login{role: "app", database: "sales", secret: "orders-app"}, "orders-rw.shop.svc", []string{"-c", "select 1"})
	for _, want := range []string{"PGHOST=orders-rw.shop.svc", "PGPORT=5432", "PGDATABASE=sales", "PGUSER=app",
		"PGSSLMODE=verify-full", "PGSSLROOTCERT=/etc/tusk/tls/replication/ca.crt"} {
		if !slices.Contains(cmd, want) {
			t.Errorf("the command lacks %s: %q", want, cmd)
		}
	}
	if cmd[0] != "env" || !slices.Equal(cmd[len(cmd)-3:], []string{"psql", "-c", "select 1"}) {
		t.Errorf("the command is %q", cmd)
	}
	for _, arg := range cmd {
		if strings.Contains(strings.ToUpper(arg), "PGPASSWORD=") {
			t.Errorf("the command sets the password in its arguments: %q", arg)
		}
	}
}

// The script as the pod runs it (without a terminal): it says it is ready,
// reads the password line, and psql gets it in PGPASSWORD alone, its
// arguments and the rest of the input; its exit code is psql's.
func TestPsqlScriptHandsThePasswordToPsql(t *testing.T) {
	dir := t.TempDir()
	fake := `#!/bin/sh
printf 'user=%s db=%s sslmode=%s password=%s args=%s\n' "$PGUSER" "$PGDATABASE" "$PGSSLMODE" "$PGPASSWORD" "$*"
cat
exit 3
`
	if err := os.WriteFile(filepath.Join(dir, "psql"), []byte(fake), 0o700); err != nil {
		t.Fatal(err)
	}
	args := psqlCommand(login{role: "app", database: "app"}, "localhost", []string{"-c", "select 1"})
	cmd := exec.Command(args[0], args[1:]...) // #nosec G204 -- the command under test
	cmd.Env = []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader(`p@ss 'w"ord\n` + "\nselect 2;\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ex, ok := errors.AsType[*exec.ExitError](err); !ok || ex.ExitCode() != 3 {
		t.Fatalf("the script: %v, want psql's exit code 3; stderr: %s", err, stderr.String())
	}
	want := readyLine + `user=app db=app sslmode=verify-full password=p@ss 'w"ord\n args=-c select 1` + "\nselect 2;\n"
	if string(out) != want {
		t.Errorf("the script printed\n%q\nwant\n%q", out, want)
	}
}

func TestReadyGateSwallowsTheReadyLineOnly(t *testing.T) {
	var out bytes.Buffer
	g := newReadyGate(&out)
	for _, chunk := range []string{"tusk-psql: ", "ready for the password", "\npsql (17.2)\n", "app=> "} {
		if n, err := g.Write([]byte(chunk)); err != nil || n != len(chunk) {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	select {
	case <-g.ready:
	default:
		t.Fatal("the gate is not ready after the ready line")
	}
	if out.String() != "psql (17.2)\napp=> " || !g.isReady() {
		t.Errorf("the gate wrote %q", out.String())
	}

	out.Reset()
	g = newReadyGate(&out)
	_, _ = g.Write([]byte("tusk-psql"))
	g.flush()
	_, _ = g.Write([]byte(": sh: stty: not found\n"))
	if g.isReady() || out.String() != "tusk-psql: sh: stty: not found\n" {
		t.Errorf("a failed shell: ready %t, wrote %q", g.isReady(), out.String())
	}
	out.Reset()
	g = newReadyGate(&out)
	_, _ = g.Write([]byte("exec failed\n"))
	if g.isReady() || out.String() != "exec failed\n" {
		t.Errorf("a failed shell: ready %t, wrote %q", g.isReady(), out.String())
	}
	select {
	case <-g.failed:
	default:
		t.Error("the gate of a failed shell has not failed")
	}
	out.Reset()
	g = newReadyGate(&out)
	_, _ = g.Write([]byte("tusk-psql: ready for the password\r\npsql"))
	if !g.isReady() || out.String() != "psql" {
		t.Errorf("a ready line ending in CRLF: ready %t, wrote %q", g.isReady(), out.String())
	}
}

func TestPasswordFirstWaitsForTheGate(t *testing.T) {
	ready, done := make(chan struct{}), make(chan struct{})
	password := []byte("s3cret\n")
	r := &passwordFirst{password: password, ready: ready, done: done, in: strings.NewReader("select 1;\n")}
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		got <- b
	}()
	close(ready)
	if b := <-got; string(b) != "s3cret\nselect 1;\n" {
		t.Errorf("read %q", b)
	}
	if !bytes.Equal(password, make([]byte, len(password))) {
		t.Errorf("the password stays in memory after it was sent: %q", password)
	}

	failed := make(chan struct{})
	close(failed)
	r = &passwordFirst{password: []byte("s3cret\n"), ready: make(chan struct{}), failed: failed, in: strings.NewReader("more")}
	if b, err := io.ReadAll(r); err != nil || len(b) != 0 {
		t.Errorf("a session whose shell failed read %q, %v", b, err)
	}
	close(done)
	r = &passwordFirst{password: []byte("s3cret\n"), ready: make(chan struct{}), done: done, in: strings.NewReader("more")}
	if b, err := io.ReadAll(r); err != nil || len(b) != 0 {
		t.Errorf("a session that ended before it was ready read %q, %v", b, err)
	}
}

func TestSessionError(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orders-1", Namespace: "shop"}}
	exit := func(code int) error { return utilexec.CodeExitError{Err: errors.New("command terminated"), Code: code} }
	if err := sessionError(nil, pod); err != nil {
		t.Errorf("no error: %v", err)
	}
	if ex, ok := errors.AsType[*ExitCodeError](sessionError(&ExitCodeError{Code: 2}, pod)); !ok || ex.Code != 2 {
		t.Errorf("psql's exit code 2: %v", sessionError(&ExitCodeError{Code: 2}, pod))
	}
	for err, want := range map[error]string{
		exit(exitNoRawTerminal): "could not be kept from echoing (stty): the password was not sent",
		exit(127):               "the shell in pod orders-1 failed before psql started",
		errors.New("EOF"):       "while running psql in pod orders-1: EOF",
	} {
		if got := sessionError(err, pod); got == nil || !strings.Contains(got.Error(), want) {
			t.Errorf("sessionError(%v) = %v, want %q", err, got, want)
		}
	}
}

// localStream runs command here as the pod would, with the session's
// streams, and returns its exit code as exec through the API server does.
func localStream(t *testing.T, command []string) func(context.Context, remotecommand.StreamOptions) error {
	dir := t.TempDir()
	fake := "#!/bin/sh\nprintf 'psql %s as %s\\n' \"$*\" \"$PGUSER\"\n[ \"$PGPASSWORD\" = s3cret ] || exit 9\ncat\nexit 2\n"
	if err := os.WriteFile(filepath.Join(dir, "psql"), []byte(fake), 0o700); err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, opts remotecommand.StreamOptions) error {
		cmd := exec.CommandContext(ctx, command[0], command[1:]...) // #nosec G204 -- the command under test
		cmd.Env = []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = opts.Stdin, opts.Stdout, opts.Stderr
		err := cmd.Run()
		if ex, ok := errors.AsType[*exec.ExitError](err); ok {
			return utilexec.CodeExitError{Err: err, Code: ex.ExitCode()}
		}
		return err
	}
}

// A whole session without a terminal, the script run here: the user sees
// psql's output only, psql reads the user's input after the password, and
// its exit code is the command's.
func TestSessionHandsThePasswordThenTheUsersInput(t *testing.T) {
	var out, errOut bytes.Buffer
	po := &psqlOptions{options: &options{streams: genericiooptions.IOStreams{In: strings.NewReader("select 1;\n"), Out: &out, ErrOut: &errOut}}}
	command := psqlCommand(login{role: "app", database: "app"}, "orders-rw.shop.svc", []string{"-X"})
	err := po.session(context.Background(), localStream(t, command), []byte("s3cret\n"))
	if ex, ok := errors.AsType[*ExitCodeError](err); !ok || ex.Code != 2 {
		t.Errorf("the session: %v, want psql's exit code 2", err)
	}
	if want := "psql -X as app\nselect 1;\n"; out.String() != want || errOut.Len() != 0 {
		t.Errorf("the session printed %q and %q, want %q", out.String(), errOut.String(), want)
	}
}

// A shell that fails before it is ready gets no password and no input:
// its read ends, the session too, and the user sees why.
func TestSessionSendsNothingToAShellThatFailed(t *testing.T) {
	var out bytes.Buffer
	po := &psqlOptions{options: &options{streams: genericiooptions.IOStreams{In: strings.NewReader("select 1;\n"), Out: &out, ErrOut: io.Discard}}}
	stream := func(_ context.Context, opts remotecommand.StreamOptions) error {
		_, _ = io.WriteString(opts.Stdout, "sh: 1: stty: not found\n")
		if in, _ := io.ReadAll(opts.Stdin); len(in) != 0 {
			t.Errorf("the failed shell read %q", in)
		}
		return utilexec.CodeExitError{Err: errors.New("command terminated with exit code 1"), Code: 1}
	}
	err := po.session(context.Background(), stream, []byte("s3cret\n"))
	if _, ok := errors.AsType[*ExitCodeError](err); ok || err == nil {
		t.Errorf("the session: %v, want the shell's error", err)
	}
	if out.String() != "sh: 1: stty: not found\n" {
		t.Errorf("the session printed %q", out.String())
	}
}
