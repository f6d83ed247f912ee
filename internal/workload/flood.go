package workload

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// FloodOptions configure Flood.
type FloodOptions struct {
	// URLs are asked in turn by each client, without pause.
	URLs []string
	// Clients is the number of concurrent clients.
	Clients int
	// Duration bounds the flood (0: until ctx ends).
	Duration time.Duration
	// NewConnections makes every request open a new connection (a TLS
	// handshake each), as a client that costs the server most does.
	NewConnections bool
}

// FloodReport counts the answers of a flood.
type FloodReport struct {
	Requests int64         `json:"requests"`
	Failed   int64         `json:"failed"` // no answer (refused, reset, timed out)
	ByStatus map[int]int64 `json:"byStatus"`
	Seconds  float64       `json:"seconds"`

	mu sync.Mutex
}

func (r *FloodReport) count(code int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Requests++
	if err != nil {
		r.Failed++
		return
	}
	r.ByStatus[code]++
}

// Flood asks for the URLs from Clients clients as fast as they are
// answered, as a hostile or broken neighbour would: the HTTP endpoints
// anyone may reach (readiness, metrics) must withstand it. The servers'
// certificates are not verified, as the kubelet's probes do not.
func Flood(ctx context.Context, o FloodOptions) (*FloodReport, error) {
	if len(o.URLs) == 0 || o.Clients < 1 {
		return nil, errors.New("flood needs at least one URL and one client")
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	rep := &FloodReport{ByStatus: map[int]int64{}}
	start := time.Now()
	var wg sync.WaitGroup
	for range o.Clients {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet's probes: nothing to verify against
			DisableKeepAlives: o.NewConnections,
		}}
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				code, err := ask(ctx, client, o.URLs[i%len(o.URLs)])
				if ended(ctx) {
					return // cut short by the end of the flood: not counted
				}
				rep.count(code, err)
			}
		})
	}
	wg.Wait()
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

func ask(ctx context.Context, client *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
