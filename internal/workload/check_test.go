package workload

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// ledger builds a ledger for run "r" from compact steps:
// "ack c s server time", "unk c s", "try c s", "rej c s".
func ledger(steps ...string) []Record {
	recs := []Record{{Kind: KindBegin, Run: "r", At: t0, Table: "t", Clients: 2}}
	for _, st := range steps {
		var (
			kind, server string
			c            int
			s            int64
			at           float64
		)
		_, _ = fmt.Sscan(st, &kind, &c, &s, &server, &at)
		recs = append(recs, Record{Kind: KindTry, Run: "r", Client: c, Seq: s, At: sec(at)})
		switch kind {
		case "ack":
			recs = append(recs, Record{Kind: KindAck, Run: "r", Client: c, Seq: s, At: sec(at), Server: server, ServerTime: sec(at)})
		case "unk":
			recs = append(recs, Record{Kind: KindUnknown, Run: "r", Client: c, Seq: s, At: sec(at), Error: "timeout"})
		case "rej":
			recs = append(recs, Record{Kind: KindRejected, Run: "r", Client: c, Seq: s, At: sec(at), Error: uniqueViolation})
		}
	}
	return recs
}

// rows builds rows of run "r": "c s server time".
func rows(specs ...string) []Row {
	var out []Row
	for _, sp := range specs {
		r := Row{Run: "r"}
		var at float64
		_, _ = fmt.Sscan(sp, &r.Client, &r.Seq, &r.Server, &at)
		r.CommittedAt = sec(at)
		out = append(out, r)
	}
	return out
}

func TestCheckRules(t *testing.T) {
	cases := []struct {
		name     string
		ledger   []Record
		rows     []Row
		opts     CheckOptions
		failures []string // prefixes, in order
		check    func(t *testing.T, r *CheckReport)
	}{
		{
			name:   "clean",
			ledger: ledger("ack 1 1 A 1", "ack 1 2 A 2", "ack 2 1 A 1.5"),
			rows:   rows("1 1 A 1", "1 2 A 2", "2 1 A 1.5"),
			check: func(t *testing.T, r *CheckReport) {
				if r.Acknowledged != 3 || r.Rows != 3 || len(r.Clients) != 2 || r.Clients[0].MaxAcked != 2 || r.Clients[0].MaxPresent != 2 {
					t.Errorf("report %+v", r)
				}
			},
		},
		{
			// A failed connection sent nothing: no attempt, no phantom.
			name: "failed connections are no attempts",
			ledger: append(ledger("ack 1 1 A 1"),
				Record{Kind: KindConnectFailed, Run: "r", Client: 2, At: sec(2), Error: "dial"}),
			rows: rows("1 1 A 1"),
			check: func(t *testing.T, r *CheckReport) {
				if r.Attempted != 1 || len(r.Clients) != 1 {
					t.Errorf("report %+v, want the one attempt of client 1", r)
				}
			},
		},
		{
			name:     "lost",
			ledger:   ledger("ack 1 1 A 1", "ack 1 2 A 2", "ack 1 3 A 3"),
			rows:     rows("1 1 A 1"),
			failures: []string{"LOST: 2 "},
			check: func(t *testing.T, r *CheckReport) {
				want := []Key{{"r", 1, 2}, {"r", 1, 3}}
				if !slices.Equal(r.Lost.Sample, want) || r.Clients[0].Lost != 2 || r.Clients[0].MaxPresent != 1 || r.Clients[0].MaxAcked != 3 {
					t.Errorf("lost %+v, clients %+v", r.Lost, r.Clients)
				}
			},
		},
		{
			name:   "lost but tolerated",
			ledger: ledger("ack 1 1 A 1", "ack 1 2 A 2"),
			rows:   rows("1 1 A 1"),
			opts:   CheckOptions{MaxLost: 1},
		},
		{
			name:     "duplicate",
			ledger:   ledger("ack 1 1 A 1"),
			rows:     rows("1 1 A 1", "1 1 A 1.1"),
			failures: []string{"DUPLICATE: 1 rows"},
		},
		{
			name:     "rejected by the key",
			ledger:   ledger("ack 1 1 A 1", "rej 1 1"),
			rows:     rows("1 1 A 1"),
			failures: []string{"DUPLICATE: the primary key rejected 1"},
		},
		{
			name:     "phantom",
			ledger:   ledger("ack 1 1 A 1"),
			rows:     rows("1 1 A 1", "1 7 A 2", "3 1 A 2"),
			failures: []string{"PHANTOM: 2 "},
		},
		{
			name:   "live: rows above a client's last attempt are later attempts",
			ledger: ledger("ack 1 1 A 1", "try 1 2", "ack 2 1 A 1.5"),
			rows:   rows("1 1 A 1", "1 2 A 2", "1 3 A 3", "2 1 A 1.5", "2 2 A 2.5", "3 1 A 3"),
			opts:   CheckOptions{Live: true},
			check: func(t *testing.T, r *CheckReport) {
				if r.LaterRows != 3 || r.Rows != 3 || r.Phantoms.Count != 0 || r.UnknownPresent != 1 {
					t.Errorf("report %+v", r)
				}
			},
		},
		{
			name:     "live: a phantom at or below a client's last attempt still fails",
			ledger:   ledger("ack 1 1 A 1", "ack 1 3 A 3"),
			rows:     rows("1 1 A 1", "1 2 A 2", "1 3 A 3"),
			opts:     CheckOptions{Live: true},
			failures: []string{"PHANTOM: 1 "},
		},
		{
			name:     "not live: rows above the last attempt are phantoms",
			ledger:   ledger("ack 1 1 A 1"),
			rows:     rows("1 1 A 1", "1 2 A 2"),
			failures: []string{"PHANTOM: 1 "},
		},
		{
			name:   "unknown present and absent are fine",
			ledger: ledger("ack 1 1 A 1", "unk 1 2", "unk 1 3", "try 1 4"),
			rows:   rows("1 1 A 1", "1 2 A 2", "1 4 A 4"),
			check: func(t *testing.T, r *CheckReport) {
				if r.Unknown != 3 || r.UnknownPresent != 2 || r.UnknownAbsent != 1 || r.Clients[0].MaxPresent != 4 || r.Clients[0].MaxAttempted != 4 {
					t.Errorf("report %+v", r)
				}
			},
		},
		{
			name:   "rows of other runs are ignored",
			ledger: ledger("ack 1 1 A 1"),
			rows:   append(rows("1 1 A 1"), Row{Run: "other", Client: 1, Seq: 1, Server: "A", CommittedAt: t0}),
			check: func(t *testing.T, r *CheckReport) {
				if r.OtherRunsRows != 1 || r.Rows != 1 {
					t.Errorf("report %+v", r)
				}
			},
		},
		{
			name:     "no run in the ledger",
			ledger:   nil,
			failures: []string{"the ledger names no run"},
		},
		{
			name:   "clean handover",
			ledger: ledger("ack 1 1 A 1", "ack 2 1 A 2", "unk 1 2", "ack 1 3 B 5", "ack 2 2 B 6"),
			rows:   rows("1 1 A 1", "2 1 A 2", "1 3 B 5", "2 2 B 6"),
			opts:   CheckOptions{SplitBrainWindow: 10 * time.Second},
		},
		{
			name: "interleaving A B A, the deposed primary's rows lost",
			// B was promoted at 3 while A still took writes until 4; A's
			// rows after B's promotion were lost with A's timeline, but
			// the ledger remembers their acknowledgements.
			ledger:   ledger("ack 1 1 A 1", "ack 2 1 B 3", "ack 1 2 A 4", "ack 2 2 B 5"),
			rows:     rows("1 1 A 1", "2 1 B 3", "2 2 B 5"),
			opts:     CheckOptions{SplitBrainWindow: 10 * time.Second},
			failures: []string{"LOST: 1 ", "SPLIT BRAIN: 2 "},
			check: func(t *testing.T, r *CheckReport) {
				first := r.Interleavings[0]
				if first.Server != "A" || !slices.Equal(first.Others, []string{"B"}) || !first.LeftAt.Equal(sec(1)) || !first.ResumedAt.Equal(sec(4)) {
					t.Errorf("interleavings %+v", r.Interleavings)
				}
			},
		},
		{
			name:   "A B A slower than the window is a failover and a failback",
			ledger: ledger("ack 1 1 A 1", "ack 1 2 B 3", "ack 1 3 A 40"),
			rows:   rows("1 1 A 1", "1 2 B 3", "1 3 A 40"),
			opts:   CheckOptions{SplitBrainWindow: 10 * time.Second},
		},
		{
			name:   "interleavings are not looked for without a window",
			ledger: ledger("ack 1 1 A 1", "ack 1 2 B 2", "ack 1 3 A 3"),
			rows:   rows("1 1 A 1", "1 2 B 2", "1 3 A 3"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(tc.ledger, tc.rows, tc.opts)
			if rep.OK != (len(tc.failures) == 0) || len(rep.Failures) != len(tc.failures) {
				t.Fatalf("failures %q, want %q", rep.Failures, tc.failures)
			}
			for i, f := range tc.failures {
				if !strings.HasPrefix(rep.Failures[i], f) {
					t.Errorf("failure %d is %q, want it to start with %q", i, rep.Failures[i], f)
				}
			}
			if tc.check != nil {
				tc.check(t, rep)
			}
		})
	}
}

func TestInterleavings(t *testing.T) {
	c := func(server string, at float64) Commit { return Commit{Server: server, At: sec(at)} }
	cases := []struct {
		name    string
		commits []Commit
		want    []string // "server<-others"
	}{
		{name: "one server", commits: []Commit{c("A", 1), c("A", 2)}},
		{name: "handover", commits: []Commit{c("A", 1), c("A", 2), c("B", 3), c("B", 4)}},
		{name: "two handovers, slow", commits: []Commit{c("A", 1), c("B", 3), c("C", 30)}},
		{name: "A B A", commits: []Commit{c("A", 1), c("B", 2), c("A", 3)}, want: []string{"A<-B"}},
		{name: "A B C A", commits: []Commit{c("A", 1), c("B", 2), c("C", 2.5), c("A", 3)}, want: []string{"A<-B,C"}},
		{name: "flapping", commits: []Commit{c("B", 2), c("A", 1), c("A", 3), c("B", 4)}, want: []string{"A<-B", "B<-A"}},
		{name: "A B A at the window's edge", commits: []Commit{c("A", 1), c("B", 2), c("A", 11)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, il := range Interleavings(tc.commits, 10*time.Second) {
				got = append(got, il.Server+"<-"+strings.Join(il.Others, ","))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestErrorKind(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("while inserting: %w", &pgconn.PgError{Code: "57P01"}), "admin_shutdown"},
		{&pgconn.PgError{Code: "23505"}, uniqueViolation},
		{&pgconn.PgError{Code: "XX000"}, "sqlstate_XX000"},
		{fmt.Errorf("x: %w", io.ErrUnexpectedEOF), "connection_lost"},
		{errors.New("conn closed"), "connection_lost"},
		{errors.New("something"), "other"},
	}
	for _, tc := range cases {
		if got := ErrorKind(tc.err); got != tc.want {
			t.Errorf("ErrorKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestToleratedLossIsListedInFull: every lost row the options tolerate is
// listed, beyond the usual sample, so that a caller can judge each one by
// when it was acknowledged.
func TestToleratedLossIsListedInFull(t *testing.T) {
	const lost = 3 * maxSample
	steps := []string{"ack 1 1 A 1"}
	for s := 2; s <= lost+1; s++ {
		steps = append(steps, fmt.Sprintf("ack 1 %d A %d", s, s))
	}
	r := Check(ledger(steps...), rows("1 1 A 1"), CheckOptions{MaxLost: lost})
	if !r.OK || r.Lost.Count != lost || len(r.Lost.Sample) != lost {
		t.Errorf("ok %t, %d lost, %d listed; want all %d listed", r.OK, r.Lost.Count, len(r.Lost.Sample), lost)
	}
	if r := Check(ledger(steps...), rows("1 1 A 1"), CheckOptions{}); len(r.Lost.Sample) != maxSample {
		t.Errorf("without a tolerance, %d lost rows listed, want the sample of %d", len(r.Lost.Sample), maxSample)
	}
}
