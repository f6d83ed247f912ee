package instance

import (
	"slices"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// LogFields are the keys every record of an instance manager's log
// carries, its own and PostgreSQL's alike: the cluster, the instance and
// the current timeline. The timeline is the last the manager saw (at
// start from pg_control, then at each observation of postgres: every
// /status, /readyz and /metrics answer, and at a promotion); it is left
// out while unknown.
type LogFields struct {
	cluster, instance string
	timeline          atomic.Uint32
}

// NewLogFields returns the fields of the instance of cluster.
func NewLogFields(cluster, instance string) *LogFields {
	return &LogFields{cluster: cluster, instance: instance}
}

// SetTimeline records the current timeline; nil LogFields ignore it.
func (f *LogFields) SetTimeline(timeline uint32) {
	if f != nil && timeline != 0 {
		f.timeline.Store(timeline)
	}
}

// WrapCore makes core add the fields to every record it writes, each
// unless the record has a value of its own for the key (a promotion logs
// its new timeline). Give it to zap.WrapCore.
func (f *LogFields) WrapCore(core zapcore.Core) zapcore.Core {
	return fieldsCore{Core: core, f: f}
}

type fieldsCore struct {
	zapcore.Core
	f *LogFields
}

func (c fieldsCore) With(fields []zapcore.Field) zapcore.Core {
	return fieldsCore{Core: c.Core.With(fields), f: c.f}
}

func (c fieldsCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

func (c fieldsCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	has := func(key string) bool {
		return slices.ContainsFunc(fields, func(f zapcore.Field) bool { return f.Key == key })
	}
	all := slices.Clip(fields)
	if c.f.cluster != "" && !has("cluster") {
		all = append(all, zap.String("cluster", c.f.cluster))
	}
	if c.f.instance != "" && !has("instance") {
		all = append(all, zap.String("instance", c.f.instance))
	}
	if tl := c.f.timeline.Load(); tl != 0 && !has("timeline") {
		all = append(all, zap.Uint32("timeline", tl))
	}
	return c.Core.Write(ent, all)
}
