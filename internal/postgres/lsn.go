package postgres

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// LSN is a PostgreSQL log sequence number: a byte position in the
// write-ahead log. PostgreSQL prints it as two hexadecimal halves, "X/Y"
// (the high and low 32 bits), which is the form ParseLSN reads and String
// writes. The zero LSN is PostgreSQL's InvalidXLogRecPtr.
type LSN uint64

// InvalidLSN is the zero LSN, which PostgreSQL uses for "no location"
// (for example pg_last_wal_receive_lsn() on a server that never streamed).
const InvalidLSN LSN = 0

// maxLSNHalfDigits is how many hex digits each half of "X/Y" may have:
// PostgreSQL's pg_lsn input accepts 1 to 8 (MAXPG_LSNCOMPONENT).
const maxLSNHalfDigits = 8

// ErrLSNSyntax is wrapped by every ParseLSN error, so callers can tell a
// malformed LSN from other failures with errors.Is; its text says what a
// valid one looks like.
var ErrLSNSyntax = errors.New(`an LSN is two hexadecimal numbers of 1 to 8 digits separated by "/", such as 16/B374D848`)

// ParseLSN reads an LSN in the "X/Y" form PostgreSQL prints, accepting
// exactly what PostgreSQL's pg_lsn type accepts: 1 to 8 hex digits (either
// case) on each side of a single "/", nothing else, no surrounding space.
// Being exactly as strict keeps an LSN Tusk accepts one PostgreSQL accepts
// too (for example as recovery_target_lsn).
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("while parsing LSN %q: %w", s, ErrLSNSyntax)
	}
	h, err := parseLSNHalf(hi)
	if err != nil {
		return 0, fmt.Errorf("while parsing LSN %q: %w", s, err)
	}
	l, err := parseLSNHalf(lo)
	if err != nil {
		return 0, fmt.Errorf("while parsing LSN %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

// parseLSNHalf parses one side of "X/Y". strconv.ParseUint alone would
// also accept "+", "_" and "0x", which PostgreSQL does not.
func parseLSNHalf(s string) (uint64, error) {
	if len(s) == 0 || len(s) > maxLSNHalfDigits || !isHex(s) {
		return 0, ErrLSNSyntax
	}
	return strconv.ParseUint(s, 16, 32)
}

// isHex says whether s consists only of hexadecimal digits (either case).
func isHex(s string) bool {
	return onlyBytesOf(s, "0123456789abcdefABCDEF")
}

// onlyBytesOf says whether every byte of s is one of allowed.
func onlyBytesOf(s, allowed string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(allowed, s[i]) < 0 {
			return false
		}
	}
	return true
}

// String prints the LSN as PostgreSQL does ("%X/%X": uppercase hex, no
// padding), so it compares equal, as text, to what pg_current_wal_lsn()
// returns and reads naturally in logs next to PostgreSQL's own.
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint64(l)>>32, uint64(l)&math.MaxUint32)
}

// MarshalText writes the "X/Y" form, so an LSN in a JSON document (the
// instance manager's /status) reads as PostgreSQL prints it, not as a
// 64-bit number that JavaScript clients would round.
func (l LSN) MarshalText() ([]byte, error) {
	return []byte(l.String()), nil
}

// UnmarshalText reads the "X/Y" form; see ParseLSN.
func (l *LSN) UnmarshalText(text []byte) error {
	v, err := ParseLSN(string(text))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Minus returns a - b in bytes, as a signed number so that a replica
// reported ahead of a stale primary reading shows up as negative instead of
// wrapping around to an absurd lag. The result saturates at the int64
// limits, which only LSNs more than 8 EiB apart can reach.
func (l LSN) Minus(b LSN) int64 {
	if l >= b {
		d := uint64(l - b)
		if d > math.MaxInt64 {
			return math.MaxInt64
		}
		return int64(d)
	}
	d := uint64(b - l)
	if d > math.MaxInt64 {
		return math.MinInt64
	}
	return -int64(d)
}

// Lag is how many bytes of WAL behind is from ahead, never negative: the
// figure to report as replication lag. Readings are taken at different
// moments, so a replica can appear ahead of the primary; that is no lag,
// not a negative one.
func Lag(ahead, behind LSN) int64 {
	return max(ahead.Minus(behind), 0)
}
