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
	w := window{from: from, to: to, began: map[Key]time.Time{}, rep: WindowReport{Errors: map[string]int{}}}
	for _, r := range recs {
		w.add(r)
	}
	return w.rep
}

// window is Window's state: the attempts begun in [from, to], by key.
type window struct {
	from, to time.Time
	began    map[Key]time.Time
	rep      WindowReport
}

func (w *window) in(t time.Time) bool { return !t.Before(w.from) && !t.After(w.to) }

func (w *window) add(r Record) {
	k := Key{Run: r.Run, Client: r.Client, Seq: r.Seq}
	switch r.Kind {
	case KindConnectFailed:
		if w.in(r.At) {
			w.rep.Errors["connect_"+r.Error]++
		}
	case KindTry:
		// An ordinary client's wait starts with its connecting.
		start := r.At
		if !r.Connecting.IsZero() {
			start = r.Connecting
		}
		if w.in(start) {
			w.began[k] = start
		}
	case KindAck, KindUnknown, KindRejected:
		w.outcome(k, r)
	}
}

// outcome counts the outcome r of the attempt k, if it began in the
// window.
func (w *window) outcome(k Key, r Record) {
	start, ok := w.began[k]
	if !ok {
		return
	}
	if r.Kind == KindAck {
		w.rep.Acknowledged++
	} else {
		w.rep.Errors[r.Error]++
	}
	if d := r.At.Sub(start); d > w.rep.Longest {
		w.rep.Longest, w.rep.LongestKey = d, k
	}
}
