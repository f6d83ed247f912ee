package instance

import (
	"errors"
	"fmt"
	"testing"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
)

func TestDecideBackupStart(t *testing.T) {
	tests := []struct {
		running string
		known   bool
		want    backupStart
	}{
		{"", false, startBackup},
		{"", true, reportBackup},       // done already: report, start nothing
		{"b1", true, reportBackup},     // the running one asked again
		{"b1", false, refuseBackup},    // another one runs
		{"other", false, refuseBackup}, // whatever its name
	}
	for _, tt := range tests {
		if got := decideBackupStart(tt.running, tt.known); got != tt.want {
			t.Errorf("running %q, known %v: %v, want %v", tt.running, tt.known, got, tt.want)
		}
	}
}

func TestLastBackupSegment(t *testing.T) {
	const seg16 = 16 << 20
	tests := []struct {
		end      string
		timeline uint32
		want     string
	}{
		{"0/3000100", 1, "000000010000000000000003"},
		{"0/4000000", 1, "000000010000000000000003"}, // at a boundary: the segment before
		{"0/4000001", 1, "000000010000000000000004"},
		{"2/A0000060", 3, "0000000300000002000000A0"},
	}
	for _, tt := range tests {
		end, err := postgres.ParseLSN(tt.end)
		if err != nil {
			t.Fatal(err)
		}
		got, err := lastBackupSegment(&basebackup.Record{EndLSN: end, Timeline: tt.timeline, WALSegmentSize: seg16})
		if err != nil || got != tt.want {
			t.Errorf("end %s on timeline %d: %q, %v; want %q", tt.end, tt.timeline, got, err, tt.want)
		}
	}
	if _, err := lastBackupSegment(&basebackup.Record{Timeline: 1, WALSegmentSize: seg16}); err == nil {
		t.Error("no end LSN: no error")
	}
}

func TestBackupErrorKind(t *testing.T) {
	wrapped := func(k objectstore.Kind) error {
		return fmt.Errorf("while uploading backup %q: %w", "b", &objectstore.Error{Op: "putting", Kind: k, Err: errors.New("x")})
	}
	tests := []struct {
		err  error
		want string
	}{
		{wrapped(objectstore.KindCredentials), instanceapi.BackupErrorWrongCredentials},
		{wrapped(objectstore.KindNoSuchBucket), instanceapi.BackupErrorBucketNotFound},
		{wrapped(objectstore.KindUnreachable), instanceapi.BackupErrorEndpointUnreachable},
		{wrapped(objectstore.KindTLS), instanceapi.BackupErrorTLSFailure},
		{wrapped(objectstore.KindOther), ""},
		{errors.New("pg_basebackup failed"), ""},
	}
	for _, tt := range tests {
		if got := backupErrorKind(tt.err); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.err, got, tt.want)
		}
	}
}
