package workload

import (
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	recs := []Record{
		{Kind: KindBegin, Run: "r", At: at(0)},
		// Before the window: its long wait is not the window's.
		{Kind: KindTry, Run: "r", Client: 1, Seq: 1, At: at(0)},
		{Kind: KindAck, Run: "r", Client: 1, Seq: 1, At: at(5000)},
		// In it: acknowledged after 1.2 s.
		{Kind: KindTry, Run: "r", Client: 1, Seq: 2, At: at(1000)},
		{Kind: KindAck, Run: "r", Client: 1, Seq: 2, At: at(2200)},
		// An ordinary client's: sent at 1.5 s, but connecting since 0.5 s
		// (before the window: left out) and since 1.1 s (in it: 1.9 s).
		{Kind: KindTry, Run: "r", Client: 2, Seq: 1, At: at(1500), Connecting: at(500)},
		{Kind: KindAck, Run: "r", Client: 2, Seq: 1, At: at(1600)},
		{Kind: KindTry, Run: "r", Client: 2, Seq: 2, At: at(2900), Connecting: at(1100)},
		{Kind: KindAck, Run: "r", Client: 2, Seq: 2, At: at(3000)},
		// An error and a failed connection in it; one failed connection after.
		{Kind: KindTry, Run: "r", Client: 3, Seq: 1, At: at(1200)},
		{Kind: KindUnknown, Run: "r", Client: 3, Seq: 1, At: at(1300), Error: "08006"},
		{Kind: KindConnectFailed, Run: "r", Client: 3, At: at(1400), Error: "dial"},
		{Kind: KindConnectFailed, Run: "r", Client: 3, At: at(4100), Error: "dial"},
		// Begun in it, no outcome: the writer stopped.
		{Kind: KindTry, Run: "r", Client: 4, Seq: 1, At: at(3900)},
	}
	rep := Window(recs, at(1000), at(4000))
	if rep.Acknowledged != 2 {
		t.Errorf("acknowledged %d, want 2 (seq 2 of clients 1 and 2)", rep.Acknowledged)
	}
	if rep.Errors["08006"] != 1 || rep.Errors["connect_dial"] != 1 || rep.ErrorCount() != 2 {
		t.Errorf("errors %v, want one 08006 and one connect_dial", rep.Errors)
	}
	if want := (Key{Run: "r", Client: 2, Seq: 2}); rep.Longest != 1900*time.Millisecond || rep.LongestKey != want {
		t.Errorf("longest %s (%+v), want 1.9s (%+v): from the start of its connecting", rep.Longest, rep.LongestKey, want)
	}
}
