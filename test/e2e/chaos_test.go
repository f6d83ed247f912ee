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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/workload"
)

// The environment switches of TestChaos.
const (
	envChaos         = "TUSK_CHAOS"          // 1 runs it; the plain e2e run skips it
	envChaosSeed     = "TUSK_CHAOS_SEED"     // the random order of the faults; default 1
	envChaosDuration = "TUSK_CHAOS_DURATION" // inject faults until this has passed; default: each fault twice
	envChaosFaults   = "TUSK_CHAOS_FAULTS"   // comma list of fault names; default defaultChaosFaults
	envChaosHold     = "TUSK_CHAOS_HOLD"     // how long a freeze or a network cut lasts; default 20s
	envChaosMode     = "TUSK_CHAOS_MODE"     // sync (default: synchronous quorum, nothing may be lost) or async
	envChaosLease    = "TUSK_CHAOS_LEASE"    // "duration,renewal" of the primary Lease (spec.highAvailability); default the manager's 10s,2s
)

// chaosFault is a kind of fault: inject breaks something and, for faults
// that last (freeze, network cut), holds it for hold and undoes it. It
// returns what it did, for the log.
type chaosFault struct {
	name string
	node bool // acts on the node's processes (requireNodeAccess)
	// failsOver: the fault makes the operator promote a replica, which in
	// asynchronous mode may lose the last commits the replica had not
	// received (assertBoundedLoss); no other fault may lose anything.
	failsOver bool
	inject    func(t *testing.T, ns, cluster string, hold time.Duration) string
	describes string
}

var chaosFaults = []chaosFault{
	{name: "delete-primary", failsOver: true, describes: "delete the primary's pod", inject: func(t *testing.T, ns, cluster string, _ time.Duration) string {
		return "deleted pod " + deletePrimaryPod(t, ns, cluster)
	}},
	{name: "evict-primary", failsOver: true, describes: "evict the primary's pod through the eviction API, as kubectl drain does", inject: func(t *testing.T, ns, cluster string, _ time.Duration) string {
		return "evicted pod " + evictPrimaryPod(t, ns, cluster)
	}},
	{name: "kill-postmaster", node: true, describes: "SIGKILL the primary's postmaster", inject: func(t *testing.T, ns, cluster string, _ time.Duration) string {
		primary := currentPrimary(t, ns, cluster)
		return fmt.Sprintf("SIGKILLed the postmaster of %s (host PID %d)", primary, killPostmaster(t, ns, primary))
	}},
	{name: "kill-operator", describes: "delete the operator's pod with grace 0", inject: func(t *testing.T, _, _ string, _ time.Duration) string {
		return "killed operator pods " + strings.Join(killOperator(t), ", ")
	}},
	{name: "kill-operator-mid-failover", failsOver: true, node: true, describes: "delete the primary's pod, and SIGKILL the operator as soon as it records the replica it promotes", inject: func(t *testing.T, ns, cluster string, _ time.Duration) string {
		f := killOperatorMidFailover(t, ns, cluster)
		when := "before it recorded the new primary"
		if f.recorded {
			when = "too late: it had recorded the new primary already"
		}
		return fmt.Sprintf("deleted pod %s; killed the operator while it promoted %s, %s", f.oldPrimary, f.target, when)
	}},
	{name: "restart-all", describes: "delete every instance pod at once", inject: func(t *testing.T, ns, cluster string, _ time.Duration) string {
		return "deleted pods " + strings.Join(deleteAllInstancePods(t, ns, cluster), ", ")
	}},
	{name: "freeze-primary", failsOver: true, node: true, describes: "SIGSTOP the primary's PostgreSQL for the hold, then SIGCONT", inject: func(t *testing.T, ns, cluster string, hold time.Duration) string {
		primary := currentPrimary(t, ns, cluster)
		thaw := freezePostgres(t, ns, primary)
		holdFault(t, hold)
		thaw()
		return fmt.Sprintf("froze the PostgreSQL of %s for %s", primary, hold)
	}},
	{name: "cut-primary", failsOver: true, node: true, describes: "drop all but loopback traffic of the primary's pod for the hold, then restore", inject: func(t *testing.T, ns, cluster string, hold time.Duration) string {
		primary := currentPrimary(t, ns, cluster)
		restore := cutNetwork(t, ns, primary)
		holdFault(t, hold)
		restore()
		return fmt.Sprintf("cut the network of %s for %s", primary, hold)
	}},
}

// defaultChaosFaults are every fault kind: a freeze and a network cut of
// the primary are survived by failover with fencing (docs/chaos.md).
var defaultChaosFaults = []string{"delete-primary", "evict-primary", "kill-postmaster", "kill-operator", "kill-operator-mid-failover", "restart-all", "freeze-primary", "cut-primary"}

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
	async    bool
	// lease is spec.highAvailability; nil leaves the defaults.
	lease *tuskv1alpha1.HighAvailabilitySpec
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
	switch m := os.Getenv(envChaosMode); m {
	case "", "sync":
	case "async":
		c.async = true
	default:
		t.Fatalf("%s=%q: sync or async", envChaosMode, m)
	}
	if s := os.Getenv(envChaosLease); s != "" {
		c.lease = parseChaosLease(t, s)
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

// parseChaosLease reads "duration,renewal", such as "4s,1s".
func parseChaosLease(t *testing.T, s string) *tuskv1alpha1.HighAvailabilitySpec {
	t.Helper()
	d, r, ok := strings.Cut(s, ",")
	duration, err1 := time.ParseDuration(d)
	renew, err2 := time.ParseDuration(r)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("%s=%q: want duration,renewal such as 4s,1s", envChaosLease, s)
	}
	return &tuskv1alpha1.HighAvailabilitySpec{LeaseDuration: metav1.Duration{Duration: duration}, LeaseRenewInterval: metav1.Duration{Duration: renew}}
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
	failsOver  bool
	start, end time.Time
	// lagBytes is the largest replay lag of a replica in status just
	// before the fault; lost counts the rows it lost (asynchronous mode).
	lagBytes int64
	lost     int
	// timeline is what was seen between start and end, printed with the
	// figures (which read the ledger once for all faults).
	timeline *failoverTimeline
}

// TestChaos: see the top of the file and docs/chaos.md.
func TestChaos(t *testing.T) {
	serial(t, stopsTheOperator)
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
	mode := "sync"
	if cfg.async {
		mode = "async"
	}
	t.Logf("chaos: seed %d, mode %s, faults %s, duration %s, hold %s (replay: make chaos SEED=%d MODE=%s FAULTS=%s DURATION=%s HOLD=%s LEASE=%s)",
		cfg.seed, mode, chaosFaultNames(cfg.faults), duration, cfg.hold, cfg.seed, mode, chaosFaultNames(cfg.faults), os.Getenv(envChaosDuration), cfg.hold,
		os.Getenv(envChaosLease))

	ns := newNamespace(t)
	name := "chaos-" + mode
	newChaosCluster(t, ns, name, cfg)
	w := startWorkload(t, ns, name)
	pooled := startPooledWorkload(t, ns, name)
	if cfg.async {
		// Every client: the ordinary one commits less often, but a commit
		// of its in the last moment before a failover is lost the same way
		// (assertBoundedLoss then checks each lost row against the bound).
		for _, c := range append(w.writers(), pooled.writers()...) {
			c.maxLost = asyncMaxLost
		}
	}
	events := runChaos(t, ns, name, w, rng, cfg)

	for _, c := range append(w.writers(), pooled.writers()...) {
		c.Stop(t)
		lost := checkClient(t, c, cfg.async, events)
		if c == w {
			for i, n := range lost {
				events[i].lost = n
			}
		}
	}
	logFailoverEvents(t, ns)
	logChaosFigures(t, w, events, cfg.async)
	checkPooledClients(t, pooled, events)
}

// chaosPooledClients is how many clients of the chaos suite's pooled
// writer hold a connection through the pooler.
const chaosPooledClients = 8

// startPooledWorkload puts a rw pooler (transaction mode, two pods) in
// front of the cluster and starts a second workload pod, "pooled", whose
// clients write through it: the faults hit its clients too.
func startPooledWorkload(t *testing.T, ns, cluster string) *workloadWriter {
	t.Helper()
	pooler := cluster + "-pooler"
	createPooler(t, ns, pooler, cluster)
	waitPoolerReady(t, ns, pooler, 2)
	pod := workloadPodThrough(ns, cluster, pooler, chaosPooledClients)
	pod.Name = "pooled"
	return startWorkloadPod(t, ns, cluster, pod)
}

// checkPooledClients prints, fault by fault, the errors and write gap of
// the clients writing through the pooler, and fails the test if one saw
// an error across a handover (a deleted or evicted primary): the pooler
// is paused around it (docs/pooler.md).
func checkPooledClients(t *testing.T, pooled *workloadWriter, events []chaosEvent) {
	t.Helper()
	for _, c := range pooled.writers() {
		recs := c.Ledger(t)
		for _, ev := range events {
			rep := workload.Window(recs, ev.start, ev.end)
			t.Logf("figure: chaos %s through the pooler at %s, %s client: %d errors %v, longest wait %.2fs, write gap %.2fs",
				ev.fault, ev.start.Format("15:04:05"), clientKind(c), rep.ErrorCount(), rep.Errors, rep.Longest.Seconds(),
				writeGapAround(recs, ev.start, ev.end).Seconds())
			if (ev.fault == "delete-primary" || ev.fault == "evict-primary") && rep.ErrorCount() > 0 {
				t.Errorf("the %s client saw errors through the pooler across %s at %s: %v", clientKind(c), ev.fault,
					ev.start.Format("15:04:05"), rep.Errors)
			}
		}
	}
}

// checkClient checks one client's rows: nothing acknowledged lost
// (synchronous mode), or no loss the faults' bound does not explain
// (asynchronous mode; it returns how many rows each event explains).
func checkClient(t *testing.T, c *workloadWriter, async bool, events []chaosEvent) []int {
	t.Helper()
	rep := c.Check(t)
	if !async {
		assertNoWriteLost(t, rep)
		return make([]int, len(events))
	}
	return assertBoundedLoss(t, c, rep, events)
}

// newChaosCluster is the HA tests' cluster (newHACluster): synchronous
// quorum (ANY 1, block), or synchronous replication off (async); with
// the Lease timings asked for.
func newChaosCluster(t *testing.T, ns, name string, cfg chaosConfig) {
	t.Helper()
	pgc := newCluster(ns, name, haInstances)
	pgc.Spec.PostgreSQL.Synchronous = tuskv1alpha1.SynchronousSpec{Mode: tuskv1alpha1.SynchronousQuorum, Number: 1,
		WhenTooFewStandbys: tuskv1alpha1.StandbyShortageBlock}
	if cfg.async {
		pgc.Spec.PostgreSQL.Synchronous = tuskv1alpha1.SynchronousSpec{Mode: tuskv1alpha1.SynchronousOff}
	}
	pgc.Spec.HighAvailability = cfg.lease
	createCluster(t, pgc, "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, haInstances, time.Minute)
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
		ok := t.Run(fmt.Sprintf("%02d-%s", i+1, f.name), func(t *testing.T) { ev = injectAndHeal(t, ns, cluster, w, f, cfg, events) })
		if !ok {
			t.Fatalf("fault %d (%s) left the cluster broken or lost writes: stopping", i+1, f.name)
		}
		events = append(events, ev)
	}
}

// injectAndHeal injects one fault, waits for the cluster to be Healthy and
// the writes to go through again, and checks the workload so far.
func injectAndHeal(t *testing.T, ns, cluster string, w *workloadWriter, f chaosFault, cfg chaosConfig, past []chaosEvent) chaosEvent {
	ev := chaosEvent{fault: f.name, failsOver: f.failsOver, lagBytes: replayLagBytes(t, ns, cluster)}
	ev.timeline = watchTimeline(t, ns, cluster)
	ev.start = time.Now()
	t.Logf("chaos: injecting %s (%s); replicas' replay lag before it: %d bytes", f.name, f.describes, ev.lagBytes)
	t.Logf("chaos: %s", f.inject(t, ns, cluster, cfg.hold))
	waitHealthy(t, ns, cluster, haInstances, clusterChangeTimeout)
	w.WaitAcks(t, 50, 2*time.Minute)
	ev.end = time.Now()
	ev.timeline.stop()
	t.Logf("chaos: %s healed in %.1fs; primary %s", f.name, ev.end.Sub(ev.start).Seconds(), currentPrimary(t, ns, cluster))
	events := append(slices.Clone(past), ev)
	lost := checkClient(t, w, cfg.async, events)
	checkClient(t, w.ordinary, cfg.async, events)
	ev.lost = lost[len(lost)-1]
	return ev
}

// replayLagBytes is the largest replay lag of a replica the cluster's
// status reports.
func replayLagBytes(t *testing.T, ns, cluster string) int64 {
	t.Helper()
	var lag int64
	for _, in := range mustGetCluster(t, ns, cluster).Status.Instances {
		if in.LagBytes != nil {
			lag = max(lag, *in.LagBytes)
		}
	}
	return lag
}

// logChaosFigures prints, per fault kind, the median and longest write gap
// the faults of that kind caused, and the time to heal; in async mode also
// the acknowledged rows they lost, and the replicas' largest replay lag
// seen just before one of them.
func logChaosFigures(t *testing.T, w *workloadWriter, events []chaosEvent, async bool) {
	t.Helper()
	ledgers := w.ledgers(t)
	recs, ordinaryRecs := ledgers["writer"], ledgers["ordinary"]
	gaps, ordinaryGaps, heals := map[string][]time.Duration{}, map[string][]time.Duration{}, map[string][]time.Duration{}
	lost, lag := map[string]int{}, map[string]int64{}
	var kinds []string
	for _, ev := range events {
		if gaps[ev.fault] == nil {
			kinds = append(kinds, ev.fault)
		}
		gap, ordinaryGap := writeGapAround(recs, ev.start, ev.end), writeGapAround(ordinaryRecs, ev.start, ev.end)
		gaps[ev.fault] = append(gaps[ev.fault], gap)
		ordinaryGaps[ev.fault] = append(ordinaryGaps[ev.fault], ordinaryGap)
		if ev.failsOver {
			t.Logf("%s at %s, write gap %.2fs, ordinary client %.2fs:", ev.fault, ev.start.Format("15:04:05"), gap.Seconds(), ordinaryGap.Seconds())
			ev.timeline.log(t, ev.start, ev.end, ledgers)
		}
		heals[ev.fault] = append(heals[ev.fault], ev.end.Sub(ev.start))
		lost[ev.fault] += ev.lost
		lag[ev.fault] = max(lag[ev.fault], ev.lagBytes)
	}
	slices.Sort(kinds)
	mode := "sync"
	if async {
		mode = "async"
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-26s %3s %12s %10s %15s %13s %12s %6s %10s\n", "fault", "n", "gap median", "gap max",
		"ordinary median", "ordinary max", "heal median", "lost", "lag max")
	for _, k := range kinds {
		fmt.Fprintf(&table, "%-26s %3d %11.2fs %9.2fs %14.2fs %12.2fs %11.1fs %6d %9dB\n", k, len(gaps[k]),
			median(gaps[k]).Seconds(), slices.Max(gaps[k]).Seconds(), median(ordinaryGaps[k]).Seconds(), slices.Max(ordinaryGaps[k]).Seconds(),
			median(heals[k]).Seconds(), lost[k], lag[k])
	}
	t.Logf("chaos (%s): %d faults\n%s", mode, len(events), table.String())
	for _, k := range kinds {
		t.Logf("figure: chaos %s %s write gap median %.2fs max %.2fs, ordinary client median %.2fs max %.2fs (n=%d), lost %d", mode, k,
			median(gaps[k]).Seconds(), slices.Max(gaps[k]).Seconds(), median(ordinaryGaps[k]).Seconds(), slices.Max(ordinaryGaps[k]).Seconds(),
			len(gaps[k]), lost[k])
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
