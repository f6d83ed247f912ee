package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"tusk.dev/tusk/internal/workload"
)

func newWorkloadCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workload",
		Short: "A writer and a checker that prove no acknowledged write is lost (see docs/workload.md)",
	}
	cmd.AddCommand(newWorkloadWriteCommand(), newWorkloadCheckCommand(), newWorkloadFloodCommand())
	return cmd
}

func newWorkloadWriteCommand() *cobra.Command {
	var o workload.WriteOptions
	cmd := &cobra.Command{
		Use:   "write",
		Short: "Append sequence-numbered rows with concurrent clients, recording each outcome in a ledger",
		Long: "Append sequence-numbered rows with concurrent clients, recording each outcome in a ledger.\n" +
			"Stops after --duration, or at SIGINT/SIGTERM, and prints a JSON report on stdout.\n" +
			"Exits non-zero when the ledger cannot be written or the primary key rejected an attempt.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := workload.Write(ctx, o)
			if rep != nil {
				if perr := printJSON(cmd.OutOrStdout(), rep); perr != nil {
					return errors.Join(err, perr)
				}
			}
			if err == nil && rep.Rejected > 0 {
				err = fmt.Errorf("the primary key rejected %d attempts: a seq was sent twice", rep.Rejected)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.DSN, "dsn", os.Getenv("TUSK_WORKLOAD_DSN"), "libpq connection string or URI (empty: the PG* environment variables)")
	f.IntVar(&o.Clients, "clients", 4, "concurrent clients")
	f.DurationVar(&o.Duration, "duration", time.Minute, "how long to write (0: until SIGINT/SIGTERM)")
	f.StringVar(&o.Table, "table", "tusk_workload", "table to append to (created if missing)")
	f.StringVar(&o.Ledger, "ledger", "", "ledger file, appended to (required)")
	f.DurationVar(&o.Timeout, "timeout", 5*time.Second, "bound on each connection attempt and each INSERT")
	f.DurationVar(&o.Backoff, "backoff", 100*time.Millisecond, "first wait after an error, doubled while errors go on")
	f.DurationVar(&o.MaxBackoff, "max-backoff", time.Second, "longest wait after an error")
	f.DurationVar(&o.SyncEvery, "fsync-interval", time.Second, "how often the ledger is fsync'ed (and at exit)")
	f.DurationVar(&o.GapThreshold, "gap-threshold", time.Second, "list the write gaps longer than this")
	f.BoolVar(&o.Ordinary, "ordinary", false, "behave as an ordinary client with libpq's defaults: a new connection per statement, "+
		"no connect or statement timeout (--timeout ignored), a fixed --backoff after an error")
	f.DurationVar(&o.Interval, "interval", 0, "each client's pause between two statements (default none: as fast as the server commits)")
	f.BoolVar(&o.Read, "read", false, "read (a query per statement, no table) instead of writing: the ledger's acknowledgements are answered reads")
	_ = cmd.MarkFlagRequired("ledger")
	return cmd
}

func newWorkloadCheckCommand() *cobra.Command {
	var (
		dsn, table, ledger, state string
		readTimeout               time.Duration
		o                         workload.CheckOptions
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Read every row back and compare with the ledger: lost, duplicate and phantom rows, split brain",
		Long: "Read every row back and compare with the ledger: lost, duplicate and phantom rows, split brain.\n" +
			"Prints a JSON report on stdout and exits non-zero when a rule is broken.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var (
				rep *workload.CheckReport
				err error
			)
			switch {
			case state != "" && !o.Live:
				return errors.New("--state needs --live: the check once the writer stopped is a full one")
			case state != "":
				rep, err = workload.CheckDatabaseSince(ctx, dsn, table, ledger, state, readTimeout, o)
			default:
				rep, err = workload.CheckDatabase(ctx, dsn, table, ledger, readTimeout, o)
			}
			if err != nil {
				return err
			}
			if err := printJSON(cmd.OutOrStdout(), rep); err != nil {
				return err
			}
			if !rep.OK {
				return fmt.Errorf("the check failed: %v", rep.Failures)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dsn, "dsn", os.Getenv("TUSK_WORKLOAD_DSN"), "libpq connection string or URI (empty: the PG* environment variables)")
	f.StringVar(&table, "table", "tusk_workload", "table the writer appended to")
	f.StringVar(&ledger, "ledger", "", "the writer's ledger file (required)")
	f.DurationVar(&readTimeout, "read-timeout", 2*time.Minute, "longest wait to connect and read the table (0: none); reading the ledger and comparing are not bounded")
	f.IntVar(&o.MaxLost, "max-lost", 0, "lost acknowledged rows tolerated (asynchronous replication); 0 for synchronous mode")
	f.DurationVar(&o.SplitBrainWindow, "split-brain-window", 0, "report servers that interleave commits within this window (0: off)")
	f.DurationVar(&o.GapThreshold, "gap-threshold", time.Second, "list the write gaps longer than this")
	f.BoolVar(&o.Live, "live", false, "the writer is still running: rows attempted after the ledger was read are counted (laterRows), not phantoms")
	f.StringVar(&state, "state", "", "with --live: keep what this check proved in this file, and read only the ledger and rows "+
		"new since the check that wrote it, proving the rows it verified unchanged with one aggregate query (see docs/workload.md)")
	_ = cmd.MarkFlagRequired("ledger")
	return cmd
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newWorkloadFloodCommand() *cobra.Command {
	var o workload.FloodOptions
	cmd := &cobra.Command{
		Use:   "flood URL...",
		Short: "Ask for URLs from many clients without pause, as a hostile neighbour would, and print the answers' counts",
		Long: "Ask for URLs from many clients without pause, as a hostile neighbour would, and print a JSON count of the answers.\n" +
			"Certificates are not verified (as the kubelet's probes do not). Stops after --duration or at SIGINT/SIGTERM.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, urls []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o.URLs = urls
			rep, err := workload.Flood(ctx, o)
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Clients, "clients", 32, "concurrent clients")
	f.DurationVar(&o.Duration, "duration", time.Minute, "how long to flood (0: until SIGINT/SIGTERM)")
	f.BoolVar(&o.NewConnections, "new-connections", false, "open a new connection (a TLS handshake) for every request")
	return cmd
}
