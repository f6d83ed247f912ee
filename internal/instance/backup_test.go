package instance

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"tusk.dev/tusk/internal/basebackup"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/objectstore"
	"tusk.dev/tusk/internal/postgres"
)

func TestDecideBackupStart(t *testing.T) {
	const running, completed, failed = instanceapi.BackupRunning, instanceapi.BackupCompleted, instanceapi.BackupFailed
	tests := []struct {
		running string
		known   instanceapi.BackupPhase
		want    backupStart
	}{
		{"", "", startBackup},
		{"", completed, reportBackup},   // done already: report, start nothing
		{"b1", running, reportBackup},   // the running one asked again
		{"b1", "", refuseBackup},        // another one runs
		{"b1", completed, reportBackup}, // known: whatever runs
		{"", failed, startBackup},       // it left nothing: taken anew
		{"b1", failed, refuseBackup},    // ...but not while another runs
	}
	for _, tt := range tests {
		if got := decideBackupStart(tt.running, tt.known); got != tt.want {
			t.Errorf("running %q, known %q: %v, want %v", tt.running, tt.known, got, tt.want)
		}
	}
}

func TestForgetOldBackups(t *testing.T) {
	at := func(min int) time.Time { return time.Date(2026, 11, 23, 10, min, 0, 0, time.UTC) }
	known := map[string]*instanceapi.BackupStatus{
		"old":     {Name: "old", Phase: instanceapi.BackupCompleted, StartedAt: at(1)},
		"failed":  {Name: "failed", Phase: instanceapi.BackupFailed, StartedAt: at(2)},
		"newer":   {Name: "newer", Phase: instanceapi.BackupCompleted, StartedAt: at(3)},
		"running": {Name: "running", Phase: instanceapi.BackupRunning, StartedAt: at(0)},
	}
	forgetOldBackups(known, 2)
	if len(known) != 3 || known["old"] != nil || known["running"] == nil || known["newer"] == nil {
		t.Errorf("kept %v: want the running one and the two newest ended ones", slices.Collect(maps.Keys(known)))
	}
	forgetOldBackups(known, 2)
	if len(known) != 3 {
		t.Errorf("within the bound, kept %d of 3", len(known))
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
