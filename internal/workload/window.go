package workload

import "time"

// WindowReport is what one writer's clients saw of the attempts they
// began in a stretch of time: a fault's, from its start until writes went
// through again.
type WindowReport struct {
	// Acknowledged attempts.
	Acknowledged int `json:"acknowledged"`
	// Errors by kind: failed statements (whose commit may or may not have
	// happened) and failed connections ("connect_<kind>").
	Errors map[string]int `json:"errors,omitempty"`
	// Longest is the longest an attempt made its client wait for its
	// outcome, from the start of its connecting (ordinary clients) or its
	// sending; LongestKey names it.
	Longest    time.Duration `json:"longest"`
	LongestKey Key           `json:"longestKey"`
}

// ErrorCount is the number of errors of every kind.
func (r WindowReport) ErrorCount() int {
	n := 0
	for _, c := range r.Errors {
		n += c
	}
	return n
}

// Window reports on the attempts of recs (one ledger) that began in
// [from, to] and the connections that failed then. An attempt without
// an outcome (the writer stopped first) is left out.
func Window(recs []Record, from, to time.Time) WindowReport {
	rep := WindowReport{Errors: map[string]int{}}
	began := map[Key]time.Time{}
	in := func(t time.Time) bool { return !t.Before(from) && !t.After(to) }
	for _, r := range recs {
		k := Key{Run: r.Run, Client: r.Client, Seq: r.Seq}
		switch r.Kind {
		case KindConnectFailed:
			if in(r.At) {
				rep.Errors["connect_"+r.Error]++
			}
		case KindTry:
			start := r.At
			if !r.Connecting.IsZero() {
				start = r.Connecting
			}
			if in(start) {
				began[k] = start
			}
		case KindAck, KindUnknown, KindRejected:
			start, ok := began[k]
			if !ok {
				continue
			}
			if r.Kind == KindAck {
				rep.Acknowledged++
			} else {
				rep.Errors[r.Error]++
			}
			if d := r.At.Sub(start); d > rep.Longest {
				rep.Longest, rep.LongestKey = d, k
			}
		}
	}
	return rep
}
