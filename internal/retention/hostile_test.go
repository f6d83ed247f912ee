package retention

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/objectstore"
)

// endlessListing is an S3 endpoint, as whoever writes a cluster's spec may
// choose one, whose listing never ends: every page names a thousand new
// keys and says more follow. It counts the pages it served.
type endlessListing struct {
	pages atomic.Int64
}

func (e *endlessListing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("list-type") != "2" {
		http.Error(w, "not here", http.StatusNotImplemented)
		return
	}
	page := e.pages.Add(1)
	prefix := r.URL.Query().Get("prefix")
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`+
		`<Name>backups</Name><Prefix>%s</Prefix><KeyCount>1000</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>`+
		`<NextContinuationToken>%d</NextContinuationToken>`, prefix, page)
	for i := range 1000 {
		fmt.Fprintf(&b, `<Contents><Key>%sdir-%d-%d/data.tar.zst</Key><LastModified>2026-11-01T00:00:00.000Z</LastModified>`+
			`<ETag>"e"</ETag><Size>3</Size><StorageClass>STANDARD</StorageClass></Contents>`, prefix, page, i)
	}
	b.WriteString(`</ListBucketResult>`)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	_, _ = w.Write([]byte(b.String()))
}

// TestLoadStopsAnEndlessListing: a listing without end makes Load stop
// with a clear error once it holds MaxBackupDirectories, instead of taking
// directories until the operator runs out of memory.
func TestLoadStopsAnEndlessListing(t *testing.T) {
	endless := &endlessListing{}
	srv := httptest.NewServer(endless)
	t.Cleanup(srv.Close)
	store, err := objectstore.New(objectstore.Config{Endpoint: srv.URL, Bucket: "backups", Path: "victim", Region: "us-east-1",
		AccessKeyID: "id", SecretAccessKey: "secret", MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	backups, err := Load(t.Context(), store)
	if err == nil || !strings.Contains(err.Error(), "more than 10000 backup directories") || !strings.Contains(err.Error(), basebackup.Prefix) {
		t.Fatalf("Load of an endless listing = %d backups, %v; want an error naming the bound", len(backups), err)
	}
	// The listing client may fetch a page or two ahead of Load.
	if pages, most := endless.pages.Load(), int64(MaxBackupDirectories/1000+3); pages > most {
		t.Errorf("Load read %d pages of the endless listing, want at most %d", pages, most)
	}
}
