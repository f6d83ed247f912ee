package workload

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// writeTestLedger writes recs with the writer and returns the file's text.
func writeTestLedger(t *testing.T, recs []Record) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger")
	w, err := CreateLedger(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(text)
}

func testLedgerRecords() []Record {
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	return []Record{
		{Kind: KindBegin, Run: "r1", At: at, Table: "t", Clients: 2},
		{Kind: KindTry, Run: "r1", Client: 1, Seq: 1, At: at},
		{Kind: KindAck, Run: "r1", Client: 1, Seq: 1, At: at, Server: "10.0.0.1", ServerTime: at, LSN: "0/3000060"},
		{Kind: KindTry, Run: "r1", Client: 2, Seq: 1, At: at},
		{Kind: KindUnknown, Run: "r1", Client: 2, Seq: 1, At: at, Error: "admin_shutdown"},
	}
}

// TestLedgerTailAnySplit reads a ledger in two pieces, the first ending at
// every byte of it in turn (as a reader finds a line being written), the
// second from the Offset the first left: every record is read once, in
// order, whatever the cut.
func TestLedgerTailAnySplit(t *testing.T) {
	want := testLedgerRecords()
	text := writeTestLedger(t, want)
	for cut := range len(text) + 1 {
		var l LedgerTail
		if err := l.Feed(text[:cut]); err != nil {
			t.Fatalf("cut at %d: first piece: %v", cut, err)
		}
		first := len(l.Records())
		if err := l.Feed(text[l.Offset():]); err != nil {
			t.Fatalf("cut at %d: second piece: %v", cut, err)
		}
		if got := l.Records(); !slices.Equal(got, want) {
			t.Fatalf("cut at %d (%d records from the first piece): got %+v, want %+v", cut, first, got, want)
		}
		if l.Offset() != int64(len(text)) {
			t.Fatalf("cut at %d: offset %d after reading all %d bytes", cut, l.Offset(), len(text))
		}
	}
}

// TestLedgerTailPartialLastLine: a line without its newline is left for the
// next read, which finds it complete; a read that finds nothing new adds
// nothing.
func TestLedgerTailPartialLastLine(t *testing.T) {
	recs := testLedgerRecords()
	text := writeTestLedger(t, recs[:2])
	full := writeTestLedger(t, recs[:3])
	line3 := full[len(text):]
	var l LedgerTail
	// The writer is halfway through the third line.
	if err := l.Feed(text + line3[:len(line3)/2]); err != nil {
		t.Fatal(err)
	}
	if got := l.Records(); !slices.Equal(got, recs[:2]) || l.Offset() != int64(len(text)) {
		t.Fatalf("after a half-written line: %d records, offset %d; want 2, %d", len(got), l.Offset(), len(text))
	}
	before := l.Records()
	// The same half line, read again: nothing new.
	if err := l.Feed(line3[:len(line3)/2]); err != nil {
		t.Fatal(err)
	}
	if l.Offset() != int64(len(text)) || len(l.Records()) != 2 {
		t.Fatalf("reading the half line again moved to offset %d, %d records", l.Offset(), len(l.Records()))
	}
	// The line completed.
	if err := l.Feed(line3); err != nil {
		t.Fatal(err)
	}
	if got := l.Records(); !slices.Equal(got, recs[:3]) || l.Offset() != int64(len(full)) {
		t.Fatalf("after the line completed: %+v, offset %d; want %+v, %d", got, l.Offset(), recs[:3], len(full))
	}
	if !slices.Equal(before, recs[:2]) {
		t.Fatalf("a slice returned before changed: %+v", before)
	}
}

// TestLedgerTailRecordsAreTheCallers: a caller may append to the records
// returned; the next Feed changes neither the caller's records nor its own.
func TestLedgerTailRecordsAreTheCallers(t *testing.T) {
	recs := testLedgerRecords()
	var (
		l    LedgerTail
		text string
		mine []Record
	)
	for i := range recs {
		full := writeTestLedger(t, recs[:i+1])
		if err := l.Feed(full[len(text):]); err != nil {
			t.Fatal(err)
		}
		text = full
		if got := l.Records(); !slices.Equal(got, recs[:i+1]) {
			t.Fatalf("after %d lines the tail has %+v", i+1, got)
		}
		if i > 0 && mine[i].Kind != KindEnd {
			t.Fatalf("after %d lines, a Feed changed the record the caller appended: %+v", i+1, mine[i])
		}
		mine = append(l.Records(), Record{Kind: KindEnd})
	}
}

// TestLedgerTailBadLine: a complete line that does not parse fails the read
// and consumes nothing, not even the good lines before it.
func TestLedgerTailBadLine(t *testing.T) {
	recs := testLedgerRecords()
	text := writeTestLedger(t, recs[:2])
	var l LedgerTail
	if err := l.Feed(text); err != nil {
		t.Fatal(err)
	}
	more := writeTestLedger(t, recs[2:3])
	if err := l.Feed(more + "{\"k\":\"try\"\n"); err == nil {
		t.Fatal("a line that does not parse was accepted")
	}
	if l.Offset() != int64(len(text)) || !slices.Equal(l.Records(), recs[:2]) {
		t.Fatalf("a failed read moved to offset %d with %d records; want %d, 2", l.Offset(), len(l.Records()), len(text))
	}
}
