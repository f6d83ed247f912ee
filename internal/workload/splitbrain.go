package workload

import (
	"cmp"
	"slices"
	"time"
)

// Commit is one committed row: which server committed it and when, by that
// server's clock.
type Commit struct {
	Server string
	At     time.Time
}

// Interleaving is a server that took writes again shortly after another
// server did, while it had itself taken writes before: A…A B…B A…A.
type Interleaving struct {
	Server string `json:"server"`
	// Others are the servers that committed in between.
	Others []string `json:"others"`
	// LeftAt is Server's last commit before the others', ResumedAt its
	// first one after.
	LeftAt    time.Time `json:"leftAt"`
	ResumedAt time.Time `json:"resumedAt"`
	Seconds   float64   `json:"seconds"`
}

// serverRun is a stretch of consecutive commits by one server.
type serverRun struct {
	server     string
	start, end time.Time
}

// Interleavings applies the split-brain rule of the package documentation.
func Interleavings(commits []Commit, window time.Duration) []Interleaving {
	runs := serverRuns(commits)
	var out []Interleaving
	for i := range runs {
		for j := i - 1; j >= 0 && runs[i].start.Sub(runs[j].end) < window; j-- {
			if runs[j].server != runs[i].server {
				continue
			}
			out = append(out, Interleaving{
				Server: runs[i].server, Others: serversOf(runs[j+1 : i]),
				LeftAt: runs[j].end, ResumedAt: runs[i].start,
				Seconds: runs[i].start.Sub(runs[j].end).Seconds(),
			})
			break
		}
	}
	return out
}

func serverRuns(commits []Commit) []serverRun {
	sorted := slices.Clone(commits)
	slices.SortStableFunc(sorted, func(a, b Commit) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Server, b.Server))
	})
	var runs []serverRun
	for _, c := range sorted {
		if n := len(runs); n > 0 && runs[n-1].server == c.Server {
			runs[n-1].end = c.At
			continue
		}
		runs = append(runs, serverRun{server: c.Server, start: c.At, end: c.At})
	}
	return runs
}

func serversOf(runs []serverRun) []string {
	var out []string
	for _, r := range runs {
		if !slices.Contains(out, r.server) {
			out = append(out, r.server)
		}
	}
	return out
}
