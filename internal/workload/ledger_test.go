package workload

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLedgerRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	w, err := CreateLedger(path, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	want := []Record{
		{Kind: KindBegin, Run: "r1", At: at, Table: "t", Clients: 2},
		{Kind: KindTry, Run: "r1", Client: 1, Seq: 1, At: at},
		{Kind: KindAck, Run: "r1", Client: 1, Seq: 1, At: at, Server: "10.0.0.1", ServerTime: at, LSN: "0/3000060", Warning: "01000"},
		{Kind: KindTry, Run: "r1", Client: 2, Seq: 1, At: at},
		{Kind: KindUnknown, Run: "r1", Client: 2, Seq: 1, At: at, Error: "admin_shutdown"},
		{Kind: KindEnd, Run: "r1", At: at},
	}
	for _, r := range want {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, info, err := ReadLedgerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.TruncatedTail || len(got) != len(want) {
		t.Fatalf("read %d records (truncated %v), want %d", len(got), info.TruncatedTail, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestReadLedger(t *testing.T) {
	cases := []struct {
		name      string
		text      string
		n         int
		truncated bool
		wantErr   bool
	}{
		{name: "empty", text: "", n: 0},
		{name: "complete lines", text: `{"k":"begin","r":"a","t":"2025-01-01T00:00:00Z"}` + "\n" + `{"k":"try","r":"a","c":1,"s":1,"t":"2025-01-01T00:00:00Z"}` + "\n", n: 2},
		{name: "blank lines skipped", text: "\n" + `{"k":"end","r":"a","t":"2025-01-01T00:00:00Z"}` + "\n\n", n: 1},
		{name: "last line cut short", text: `{"k":"try","r":"a","c":1,"s":1,"t":"2025-01-01T00:00:00Z"}` + "\n" + `{"k":"ack","r":"a","c":1,"s`, n: 1, truncated: true},
		{name: "garbage in the middle", text: `{"k":"try"` + "\n" + `{"k":"end","r":"a","t":"2025-01-01T00:00:00Z"}` + "\n", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recs, info, err := ReadLedger(strings.NewReader(tc.text))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if len(recs) != tc.n || info.TruncatedTail != tc.truncated {
				t.Fatalf("got %d records, truncated %v; want %d, %v", len(recs), info.TruncatedTail, tc.n, tc.truncated)
			}
		})
	}
}

// TestLedgerSurvivesKill runs a process that appends records as fast as it
// can, SIGKILLs it, and reads what it left: every line complete (or only
// the last one cut short) and the records in the order written.
func TestLedgerSurvivesKill(t *testing.T) {
	if path := os.Getenv("TUSK_TEST_LEDGER_WRITER"); path != "" {
		appendForever(path)
		return
	}
	path := filepath.Join(t.TempDir(), "ledger")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLedgerSurvivesKill$")
	cmd.Env = append(os.Environ(), "TUSK_TEST_LEDGER_WRITER="+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, err := os.Stat(path); err == nil && st.Size() > 256<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer process wrote nothing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	recs, _, err := ReadLedgerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.Seq != int64(i+1) || r.Kind != KindTry {
			t.Fatalf("record %d is %+v", i, r)
		}
	}
	t.Logf("%d records read after SIGKILL", len(recs))
}

func appendForever(path string) {
	w, err := CreateLedger(path, 10*time.Millisecond)
	if err != nil {
		os.Exit(2)
	}
	for i := int64(1); ; i++ {
		r := Record{Kind: KindTry, Run: "run-" + strconv.Itoa(int(i%7)), Client: 1, Seq: i, At: time.Now()}
		if err := w.Append(r); err != nil {
			os.Exit(3)
		}
	}
}
