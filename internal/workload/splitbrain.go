package workload

import (
	"cmp"
	"slices"
	"sort"
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
	Server string    `json:"server"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
}

// Interleavings applies the split-brain rule of the package documentation.
func Interleavings(commits []Commit, window time.Duration) []Interleaving {
	return interleavingsFrom(continueRuns(nil, commits), 0, window)
}

// interleavingsFrom applies the rule to the runs from index from on,
// looking back at all of them.
func interleavingsFrom(runs []serverRun, from int, window time.Duration) []Interleaving {
	var out []Interleaving
	for i := from; i < len(runs); i++ {
		for j := i - 1; j >= 0 && runs[i].Start.Sub(runs[j].End) < window; j-- {
			if runs[j].Server != runs[i].Server {
				continue
			}
			out = append(out, Interleaving{
				Server: runs[i].Server, Others: serversOf(runs[j+1 : i]),
				LeftAt: runs[j].End, ResumedAt: runs[i].Start,
				Seconds: runs[i].Start.Sub(runs[j].End).Seconds(),
			})
			break
		}
	}
	return out
}

// continueRuns cuts commits, which all come after the runs before, into
// runs of consecutive commits by the same server, the first one extending
// the last run before if it is the same server's. before is not changed.
func continueRuns(before []serverRun, commits []Commit) []serverRun {
	sorted := slices.Clone(commits)
	slices.SortStableFunc(sorted, compareCommits)
	runs := slices.Clone(before)
	for _, c := range sorted {
		if n := len(runs); n > 0 && runs[n-1].Server == c.Server {
			runs[n-1].End = c.At
			continue
		}
		runs = append(runs, serverRun{Server: c.Server, Start: c.At, End: c.At})
	}
	return runs
}

// compareCommits orders commits by time, then server.
func compareCommits(a, b Commit) int {
	return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Server, b.Server))
}

func serversOf(runs []serverRun) []string {
	var out []string
	for _, r := range runs {
		if !slices.Contains(out, r.Server) {
			out = append(out, r.Server)
		}
	}
	return out
}

// splitBrainState is where an incremental check left the split-brain
// rule: the verified commits up to Through are folded into the
// interleavings found and the runs a later commit can still interleave
// with; the verified commits after Through are kept as they are.
type splitBrainState struct {
	Through time.Time      `json:"through,omitzero"`
	Found   []Interleaving `json:"found,omitempty"`
	Runs    []serverRun    `json:"runs,omitempty"`
	Open    []Commit       `json:"open,omitempty"`
}

// extend adds the commits of the keys verified since (verified) and of
// those not verified yet (open), which must all come after Through. It
// returns the interleavings of every commit, and the state for the next
// check, folded up to through (Through if that is later). ok is false
// when a commit is not after Through: only the full rule places it.
func (s splitBrainState) extend(verified, open []Commit, through time.Time, window time.Duration) (found []Interleaving, next splitBrainState, ok bool) {
	early := func(c Commit) bool { return !s.Through.IsZero() && !c.At.After(s.Through) }
	if slices.ContainsFunc(verified, early) || slices.ContainsFunc(open, early) {
		return nil, s, false
	}
	all := continueRuns(s.Runs, slices.Concat(s.Open, verified, open))
	found = slices.Concat(s.Found, interleavingsFrom(all, len(s.Runs), window))
	if through.Before(s.Through) {
		through = s.Through
	}
	kept := slices.Concat(s.Open, verified)
	slices.SortStableFunc(kept, compareCommits)
	n := sort.Search(len(kept), func(i int) bool { return kept[i].At.After(through) })
	runs := continueRuns(s.Runs, kept[:n])
	next = splitBrainState{
		Through: through,
		Found:   slices.Concat(s.Found, interleavingsFrom(runs, len(s.Runs), window)),
		Runs:    lastRuns(runs, through.Add(-window)),
		Open:    kept[n:],
	}
	return found, next, true
}

// lastRuns are the runs a commit after the limit plus the window can
// interleave with: those that end after limit, and the last one, which
// such a commit of the same server continues.
func lastRuns(runs []serverRun, limit time.Time) []serverRun {
	i := sort.Search(len(runs), func(i int) bool { return runs[i].End.After(limit) })
	return slices.Clone(runs[min(i, max(len(runs)-1, 0)):])
}
