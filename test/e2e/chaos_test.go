//go:build e2e

package e2e

// TestChaos: faults picked at random, from a seed, under the workload
// writer; after each one the cluster must be Healthy again, the writes go
// through again and the checker find nothing lost, duplicated or written by
// two primaries. docs/chaos.md describes the switches; `make chaos` sets
// them.

import (
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The environment switches of TestChaos.
const (
	envChaos         = "TUSK_CHAOS"          // 1 runs it; the plain e2e run skips it
	envChaosSeed     = "TUSK_CHAOS_SEED"     // the random order of the faults; default 1
	envChaosDuration = "TUSK_CHAOS_DURATION" // inject faults until this has passed; default: each fault twice
	envChaosFaults   = "TUSK_CHAOS_FAULTS"   // comma list of fault names; default defaultChaosFaults
	envChaosHold     = "TUSK_CHAOS_HOLD"     // how long a freeze or a network cut lasts; default 20s
)

// chaosFault is a kind of fault: inject breaks something and, for faults
// that last (freeze, network cut), holds it for hold and undoes it. It
// returns what it did, for the log.
type chaosFault struct {
	name      string
	node      bool // acts on the node's processes (requireNodeAccess)
	inject    func(t *testing.T, ns, cluster string, hold time.Duration) string
	describes string
}

var chaosFaults = []chaosFault{
	{name: "delete-primary", describes: "delete the primary's pod", inject: func(t *testing.T, ns, cluster string, _ time.Duration) string {
		return "deleted pod " + deletePrimaryPod(t, ns, cluster)
	}},
	{name: "kill-postmaster", node: true, describes: "SIGKILL the primary's postmaster", inject: func(t *testing.T, ns, cluster string, _ time.Duration) string {
		primary := currentPrimary(t, ns, cluster)
		return fmt.Sprintf("SIGKILLed the postmaster of %s (host PID %d)", primary, killPostmaster(t, ns, primary))
	}},
	{name: "kill-operator", describes: "delete the operator's pod with grace 0", inject: func(t *testing.T, _, _ string, _ time.Duration) string {
		return "killed operator pods " + strings.Join(killOperator(t), ", ")
	}},
	{name: "restart-all", describes: "delete every instance pod at once", inject: func(t *testing.T, ns, cluster string, _ time.Duration) string {
		return "deleted pods " + strings.Join(deleteAllInstancePods(t, ns, cluster), ", ")
	}},
	{name: "freeze-primary", node: true, describes: "SIGSTOP the primary's PostgreSQL for the hold, then SIGCONT", inject: func(t *testing.T, ns, cluster string, hold time.Duration) string {
		primary := currentPrimary(t, ns, cluster)
		thaw := freezePostgres(t, ns, primary)
		holdFault(t, hold)
		thaw()
		return fmt.Sprintf("froze the PostgreSQL of %s for %s", primary, hold)
	}},
	{name: "cut-primary", node: true, describes: "drop all but loopback traffic of the primary's pod for the hold, then restore", inject: func(t *testing.T, ns, cluster string, hold time.Duration) string {
		primary := currentPrimary(t, ns, cluster)
		restore := cutNetwork(t, ns, primary)
		holdFault(t, hold)
		restore()
		return fmt.Sprintf("cut the network of %s for %s", primary, hold)
	}},
}

// defaultChaosFaults are every fault kind: a freeze and a network cut of
// the primary are survived by failover with fencing (docs/chaos.md).
var defaultChaosFaults = []string{"delete-primary", "kill-postmaster", "kill-operator", "restart-all", "freeze-primary", "cut-primary"}

// holdFault keeps a fault in place for d: the one wait in the suite that is
// not for a state, since the fault's duration is the point.
func holdFault(t *testing.T, d time.Duration) {
	t.Helper()
	time.Sleep(d)
}

// chaosConfig is TestChaos's environment, parsed.
type chaosConfig struct {
	seed     int64
	duration time.Duration
	hold     time.Duration
	faults   []chaosFault
}

func chaosConfigFromEnv(t *testing.T) chaosConfig {
	t.Helper()
	c := chaosConfig{seed: 1, hold: 20 * time.Second}
	var err error
	if s := os.Getenv(envChaosSeed); s != "" {
		if c.seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", envChaosSeed, s, err)
		}
	}
	for env, d := range map[string]*time.Duration{envChaosDuration: &c.duration, envChaosHold: &c.hold} {
		if s := os.Getenv(env); s != "" {
			if *d, err = time.ParseDuration(s); err != nil {
				t.Fatalf("%s=%q: %v", env, s, err)
			}
		}
	}
	names := defaultChaosFaults
	if s := os.Getenv(envChaosFaults); s != "" {
		names = strings.Split(s, ",")
	}
	for _, n := range names {
		i := slices.IndexFunc(chaosFaults, func(f chaosFault) bool { return f.name == strings.TrimSpace(n) })
		if i < 0 {
			t.Fatalf("%s names %q; the faults are %s", envChaosFaults, n, chaosFaultNames(chaosFaults))
		}
		c.faults = append(c.faults, chaosFaults[i])
	}
	return c
}

func chaosFaultNames(faults []chaosFault) string {
	names := make([]string, len(faults))
	for i, f := range faults {
		names[i] = f.name
	}
	return strings.Join(names, ",")
}

// chaosSchedule is the order of the faults without a duration: each one
// twice, shuffled by the seed.
func chaosSchedule(rng *rand.Rand, faults []chaosFault) []chaosFault {
	plan := append(slices.Clone(faults), faults...)
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	return plan
}

// chaosEvent is one fault injected and healed, for the figures.
type chaosEvent struct {
	fault      string
	start, end time.Time
}

// TestChaos: see the top of the file and docs/chaos.md.
func TestChaos(t *testing.T) {
	if os.Getenv(envChaos) != "1" {
		t.Skipf("the chaos test runs with %s=1 (make chaos)", envChaos)
	}
	cfg := chaosConfigFromEnv(t)
	if slices.ContainsFunc(cfg.faults, func(f chaosFault) bool { return f.node }) {
		requireNodeAccess(t)
	}
	rng := rand.New(rand.NewSource(cfg.seed)) // #nosec G404 -- a reproducible order, not a secret
	duration := "each fault twice"
	if cfg.duration > 0 {
		duration = cfg.duration.String()
	}
	t.Logf("chaos: seed %d, faults %s, duration %s, hold %s (replay: make chaos SEED=%d FAULTS=%s DURATION=%s HOLD=%s)",
		cfg.seed, chaosFaultNames(cfg.faults), duration, cfg.hold, cfg.seed, chaosFaultNames(cfg.faults), os.Getenv(envChaosDuration), cfg.hold)

	ns := newNamespace(t)
	const name = "chaos"
	newHACluster(t, ns, name)
	w := startWorkload(t, ns, name)
	events := runChaos(t, ns, name, w, rng, cfg)

	w.Stop(t)
	assertNoWriteLost(t, w.Check(t))
	logChaosFigures(t, w, events)
}

// runChaos injects the faults, one at a time, each in a subtest, until the
// schedule or the duration is over or a fault leaves the cluster broken.
func runChaos(t *testing.T, ns, cluster string, w *workloadWriter, rng *rand.Rand, cfg chaosConfig) []chaosEvent {
	var plan []chaosFault
	if cfg.duration == 0 {
		plan = chaosSchedule(rng, cfg.faults)
	}
	var events []chaosEvent
	began := time.Now()
	for i := 0; ; i++ {
		var f chaosFault
		switch {
		case cfg.duration == 0 && i == len(plan):
			return events
		case cfg.duration == 0:
			f = plan[i]
		case time.Since(began) >= cfg.duration:
			return events
		default:
			f = cfg.faults[rng.Intn(len(cfg.faults))]
		}
		var ev chaosEvent
		ok := t.Run(fmt.Sprintf("%02d-%s", i+1, f.name), func(t *testing.T) { ev = injectAndHeal(t, ns, cluster, w, f, cfg.hold) })
		if !ok {
			t.Fatalf("fault %d (%s) left the cluster broken or lost writes: stopping", i+1, f.name)
		}
		events = append(events, ev)
	}
}

// injectAndHeal injects one fault, waits for the cluster to be Healthy and
// the writes to go through again, and checks the workload so far.
func injectAndHeal(t *testing.T, ns, cluster string, w *workloadWriter, f chaosFault, hold time.Duration) chaosEvent {
	ev := chaosEvent{fault: f.name, start: time.Now()}
	t.Logf("chaos: injecting %s (%s)", f.name, f.describes)
	t.Logf("chaos: %s", f.inject(t, ns, cluster, hold))
	waitHealthy(t, ns, cluster, haInstances, clusterChangeTimeout)
	w.WaitAcks(t, 50, 2*time.Minute)
	ev.end = time.Now()
	t.Logf("chaos: %s healed in %.1fs; primary %s", f.name, ev.end.Sub(ev.start).Seconds(), currentPrimary(t, ns, cluster))
	assertNoWriteLost(t, w.Check(t))
	return ev
}

// logChaosFigures prints, per fault kind, the median and longest write gap
// the faults of that kind caused, and the time to heal.
func logChaosFigures(t *testing.T, w *workloadWriter, events []chaosEvent) {
	t.Helper()
	recs := w.Ledger(t)
	gaps, heals := map[string][]time.Duration{}, map[string][]time.Duration{}
	var kinds []string
	for _, ev := range events {
		if gaps[ev.fault] == nil {
			kinds = append(kinds, ev.fault)
		}
		gaps[ev.fault] = append(gaps[ev.fault], writeGapAround(recs, ev.start, ev.end))
		heals[ev.fault] = append(heals[ev.fault], ev.end.Sub(ev.start))
	}
	slices.Sort(kinds)
	var table strings.Builder
	fmt.Fprintf(&table, "%-16s %3s %12s %10s %12s\n", "fault", "n", "gap median", "gap max", "heal median")
	for _, k := range kinds {
		fmt.Fprintf(&table, "%-16s %3d %11.2fs %9.2fs %11.1fs\n", k, len(gaps[k]),
			median(gaps[k]).Seconds(), slices.Max(gaps[k]).Seconds(), median(heals[k]).Seconds())
	}
	t.Logf("chaos: %d faults\n%s", len(events), table.String())
	for _, k := range kinds {
		t.Logf("figure: chaos %s write gap median %.2fs max %.2fs (n=%d)", k,
			median(gaps[k]).Seconds(), slices.Max(gaps[k]).Seconds(), len(gaps[k]))
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
