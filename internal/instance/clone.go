package instance

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"tusk.dev/tusk/internal/instanceapi"
)

// CloneOptions make a new primary copy another running cluster instead of
// running initdb: pg_basebackup from its primary over TLS, authenticated
// with that cluster's replication client certificate, then promoted onto a
// new timeline as an independent primary.
type CloneOptions struct {
	// Source is the source cluster's primary (its -rw Service).
	Source instanceapi.Upstream
	// TLSDir holds the source's replication client certificate (tls.crt,
	// tls.key) and the CA (ca.crt) that signed its server certificate.
	TLSDir string
}

func (o *CloneOptions) validate(recovery *RecoveryOptions) error {
	if o == nil {
		return nil
	}
	var errs []error
	if o.Source.Host == "" || o.Source.Port < 1 || o.Source.Port > 65535 {
		errs = append(errs, fmt.Errorf("cloning needs the source's host and port, got %q:%d", o.Source.Host, o.Source.Port))
	}
	if o.TLSDir == "" {
		errs = append(errs, errors.New("cloning needs the source's replication client certificate (--clone-tls-dir): it copies only over TLS"))
	}
	if recovery != nil {
		errs = append(errs, errors.New("a new primary either recovers from a backup or clones another cluster, not both"))
	}
	return errors.Join(errs...)
}

// clonePrimary builds a primary's data directory in dir from a copy of
// the source cluster: pg_basebackup with the WAL streamed alongside, then
// an archive recovery that finds no archive (restore_command only says
// "not found") and so replays the copied WAL and promotes at its end, onto
// a new timeline; then this cluster's passwords, as after a recovery.
func (m *Manager) clonePrimary(ctx context.Context, dir string) error {
	src := m.opts.Clone.Source
	m.setRecoveryStep("", fmt.Sprintf("copying the source cluster's primary %s:%d with pg_basebackup", src.Host, src.Port))
	mat, err := m.cloneCerts.sync()
	if err != nil {
		return err
	}
	if mat != nil {
		m.log.Info("Using the source cluster's replication client certificate", "serial", mat.leaf.SerialNumber.Text(16), "notAfter", mat.leaf.NotAfter)
	}
	c := m.cloneCerts
	env := []string{"PGAPPNAME=" + m.opts.Name + "-clone", "PGSSLMODE=verify-full",
		"PGSSLCERT=" + c.certPath(), "PGSSLKEY=" + c.keyPath(), "PGSSLROOTCERT=" + c.caPath()}
	m.log.Info("Copying the source cluster with pg_basebackup", "host", src.Host, "port", src.Port)
	if err := m.runTool(ctx, "pg_basebackup", env, "-D", dir, "--host="+src.Host, "--port="+portArg(src.Port),
		"--username="+replicationUser, "--no-password", "--wal-method=stream", "--checkpoint=fast"); err != nil {
		return err
	}
	cd, err := m.readControlData(ctx, dir)
	if err != nil {
		return err
	}
	sourceTimeline := cd.timeline
	st := m.snapshot()
	st.role = instanceapi.RolePrimary
	if err := m.writeConfigIn(dir, st); err != nil {
		return err
	}
	// "exit 1" is "no such file" to PostgreSQL: recovery reads pg_wal only.
	settings := "\n# Promotion of a clone, added by the tusk instance manager.\nrestore_command = 'exit 1'\n"
	if err := appendRecoverySettings(dir, settings); err != nil {
		return err
	}
	m.setRecoveryStep("", "replaying the copied WAL and promoting")
	return m.finishRecovery(ctx, dir, sourceTimeline)
}

// cloning says whether this start bootstraps by cloning.
func (m *Manager) cloning() bool {
	return m.opts.Clone != nil && m.opts.Role == instanceapi.RolePrimary && !isDataDir(m.opts.DataDir)
}

// cloneCertsFor is the certificate copy of a clone's source, nil without
// one.
func cloneCertsFor(o Options) *certFiles {
	if o.Clone == nil {
		return nil
	}
	return &certFiles{what: "clone source's replication client certificate", src: o.Clone.TLSDir, dst: filepath.Join(o.RunDir, "clone-tls")}
}
