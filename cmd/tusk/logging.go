package main

import (
	goflag "flag"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// logFlags adds the --zap-* flags to fs and returns a function that builds
// the logger they describe: JSON records at info level, with readable
// timestamps, unless the flags say otherwise.
func logFlags(fs *pflag.FlagSet) func() logr.Logger {
	build := logFlagsWith(fs)
	return func() logr.Logger { return build() }
}

// logFlagsWith is logFlags whose logger takes extra options, applied
// after the flags'.
func logFlagsWith(fs *pflag.FlagSet) func(extra ...zap.Opts) logr.Logger {
	opts := &zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	gofs := goflag.NewFlagSet("log", goflag.ContinueOnError)
	opts.BindFlags(gofs)
	fs.AddGoFlagSet(gofs)
	return func(extra ...zap.Opts) logr.Logger {
		return zap.New(append([]zap.Opts{zap.UseFlagOptions(opts)}, extra...)...)
	}
}
