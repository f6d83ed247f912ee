package workload

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestFloodCountsTheAnswers(t *testing.T) {
	var n atomic.Int64
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer server.Close()
	for _, fresh := range []bool{false, true} {
		rep, err := Flood(context.Background(), FloodOptions{URLs: []string{server.URL + "/a", server.URL + "/b"}, Clients: 4,
			Duration: 300 * time.Millisecond, NewConnections: fresh})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Failed != 0 || rep.ByStatus[200] == 0 || rep.ByStatus[503] == 0 || rep.ByStatus[200]+rep.ByStatus[503] != rep.Requests {
			t.Errorf("new connections %v: %+v; want every request answered, 200s and 503s counting up to the requests", fresh, rep)
		}
	}
	if _, err := Flood(context.Background(), FloodOptions{Clients: 1}); err == nil {
		t.Error("a flood without a URL started")
	}
}
