package instance

import (
	"os"
	"path/filepath"

	"tusk.dev/tusk/internal/instance/pgconf"
	"tusk.dev/tusk/internal/instance/supervisor"
)

// jsonlogSince is the first PostgreSQL major with log_destination = jsonlog.
const jsonlogSince = 15

// logDir is where PostgreSQL's logging collector writes: named pipes the
// manager reads, in its run directory (an emptyDir in a pod: writable
// under a read-only root file system, and never on the data volume).
func (m *Manager) logDir() string { return filepath.Join(m.opts.RunDir, "log") }

// openLogPipes makes the named pipes PostgreSQL 15 and later logs into as
// jsonlog. Without them (an older major, or a directory that cannot hold
// pipes) postgres logs on its stderr, as before, which the manager
// forwards all the same.
func (m *Manager) openLogPipes() {
	if m.opts.MajorVersion < jsonlogSince {
		return
	}
	if err := os.MkdirAll(m.opts.RunDir, 0o700); err != nil {
		m.log.Error(err, "Creating the run directory for PostgreSQL's log pipes: postgres logs on its stderr")
		return
	}
	pipes, err := supervisor.OpenLogPipes(m.logDir(), m.pgLog)
	if err != nil {
		m.log.Error(err, "Opening PostgreSQL's log pipes: postgres logs on its stderr")
		return
	}
	m.logPipes = pipes
}

// closeLogPipes stops reading the pipes, once postgres has stopped.
func (m *Manager) closeLogPipes() {
	if m.logPipes != nil {
		_ = m.logPipes.Close()
	}
}

// postgresOutput is where postgres's log goes.
func (m *Manager) postgresOutput() supervisor.Output {
	return supervisor.Output{Log: m.pgLog, Pipes: m.logPipes}
}

// jsonLogFiles are log_directory and log_filename for the pipes; nil
// without them.
func (m *Manager) jsonLogFiles() *pgconf.JSONLogFiles {
	if m.logPipes == nil {
		return nil
	}
	return &pgconf.JSONLogFiles{Directory: m.logPipes.Dir(), FileName: supervisor.LogFileName}
}
