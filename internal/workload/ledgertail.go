package workload

import (
	"fmt"
	"slices"
	"strings"
)

// LedgerTail reads a ledger that is still being written, a piece at a
// time: each piece is the ledger's bytes from Offset on, so a reader that
// comes back after every fault reads what was appended since, not the
// whole ledger again. It keeps every record read so far. A last line
// without its newline is a record being written: it is not consumed, and
// Offset stays at its start, so the next piece reads it whole, once.
type LedgerTail struct {
	offset int64
	recs   []Record
}

// ResumeLedgerTail is a LedgerTail that goes on from offset, the Offset an
// earlier tail of the same ledger reached (kept by a process that read it
// before): its Records are those read from there on.
func ResumeLedgerTail(offset int64) *LedgerTail { return &LedgerTail{offset: offset} }

// Offset is the byte offset in the ledger of the next piece to Feed: just
// after the last complete line read.
func (l *LedgerTail) Offset() int64 { return l.offset }

// Feed parses piece, the ledger's bytes from Offset to where the reader
// found its end, and adds its complete lines' records. A line that does not
// parse is an error and consumes nothing.
func (l *LedgerTail) Feed(piece string) error {
	complete := piece[:strings.LastIndexByte(piece, '\n')+1]
	recs, _, err := ReadLedger(strings.NewReader(complete))
	if err != nil {
		return fmt.Errorf("while reading the ledger from byte %d on: %w", l.offset, err)
	}
	l.recs = append(l.recs, recs...)
	l.offset += int64(len(complete))
	return nil
}

// Records are the records of every complete line read so far, in the
// ledger's order. The slice is the caller's: later Feeds do not change it,
// and appending to it does not change the tail's.
func (l *LedgerTail) Records() []Record { return slices.Clip(l.recs) }
