package harness

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dedupkit/dedup/bench/contenders"
)

// FailoverConfig is one run of the failover benchmark: a group of worker
// instances under a steady load, through failure and deploy events, with
// the pause each one causes measured from the group's committed offsets.
type FailoverConfig struct {
	Brokers []string
	// Instances in the group at rest, and the input's partitions.
	Instances  int
	Partitions int32
	// IDs is how many seen IDs the table holds before the measurement.
	IDs int
	// Rate (records/s) and DupRate shape the steady load.
	Rate    int
	DupRate float64
	// SessionTimeout and CommitInterval of every instance.
	SessionTimeout time.Duration
	CommitInterval time.Duration
	// Repeat is how many times each event happens per scenario.
	Repeat int
	// Scenarios to run, by name (default: all of Scenarios()).
	Scenarios []string
	// Contenders to run, by name (default: eos).
	Contenders []string
	// PollInterval of the group's offsets and assignment (default 100ms).
	PollInterval time.Duration
	// EventTimeout bounds one event: from it until the group settled and
	// every affected partition committed again, and so the way back.
	EventTimeout time.Duration
	// ContenderLogLevel is the -log-level of every instance ("": the
	// contender's default, warn); info shows where a worker's restart or
	// restore spends its time, in the instances' logs under WorkDir.
	ContenderLogLevel string

	// Exe, ExeArgs, ExeEnv, WorkDir, Doc, ChartDir, KafkaData, Command and
	// Log as in Config.
	Exe      string
	ExeArgs  []string
	ExeEnv   []string
	WorkDir  string
	Doc      string
	ChartDir string
	// KafkaData is the kafka.sh data dir of the broker, for the doc's
	// machine section.
	KafkaData string
	Command   string
	Log       io.Writer
}

// StopMethod is how an instance is stopped.
type StopMethod struct {
	Name   string         // as the report says it
	Signal syscall.Signal // sent to the process
}

var (
	stopKill = StopMethod{Name: "kill -9", Signal: syscall.SIGKILL}
	stopTerm = StopMethod{Name: "SIGTERM", Signal: syscall.SIGTERM}
	// stopLeave is a stop for good: both the worker's contender (as
	// `processor run`) and the Kafka Streams application close and leave
	// the group on SIGUSR1.
	stopLeave = StopMethod{Name: "SIGUSR1 (stop for good: leave the group)", Signal: syscall.SIGUSR1}
)

// FailoverContender is one implementation in the failover benchmark: a
// contender kind plus the arguments every one of its instances gets. The
// harness adds the instance-specific ones itself: -group-instance-id, -state-dir,
// -session-timeout and -commit-interval.
type FailoverContender struct {
	Name  string
	Label string
	Kind  contenders.Kind
	Args  []string
	// Leave is how the "stopped for good" scenario stops an instance: a
	// SIGTERM by default; a worker that can leave the group on its way out
	// (a signal, or a flag in Args) can say so here.
	Leave StopMethod
	// Handover: on a scale out, the contender hands the new instance its
	// share of every topic within the event, so the harness waits for it
	// (eventMeasure.Handover). Kafka Streams moves a stateful task to a
	// new instance at its probing rebalance, 10 min later by default
	// (probing.rebalance.interval.ms), which the benchmark does not wait
	// for.
	Handover bool
}

// FailoverContenders are the contenders the failover benchmark knows.
// eos-standby is the worker with one standby replica, kstreams the Kafka
// Streams application (bench/kstreams) with one.
func FailoverContenders() []FailoverContender {
	return []FailoverContender{
		{Name: "eos", Label: "eos", Kind: contenders.Exactly, Leave: stopLeave, Handover: true},
		{Name: "eos-standby", Label: "eos 1 standby", Kind: contenders.Exactly,
			Args: []string{"-standby-replicas", "1"}, Leave: stopLeave, Handover: true},
		{Name: "kstreams", Label: "kstreams 1 standby", Kind: contenders.KStreams,
			Args: []string{"-standby-replicas", "1"}, Leave: stopLeave},
	}
}

// Scenario is one kind of event.
type Scenario struct {
	Name  string // flag value
	Label string // table row
	// Stop: how the victim is stopped; nil for a scale out (no victim).
	Stop *StopMethod
	// Leave: stop with the contender's Leave method instead of Stop.
	Leave bool
	// Restart: start the victim again at once (same state dir, same ID).
	Restart bool
	// Stall: report the stall of the partitions that did not move.
	Stall bool
	// Pause: report the pause of the affected partitions, which differs
	// from the gap when a contender warms a new owner up first.
	Pause bool
	// Handover: report when a new instance held its share of every topic
	// (FailoverContender.Handover).
	Handover bool
}

// Scenarios are the events, in report order.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "kill", Label: "1. kill -9, not restarted", Stop: &stopKill, Stall: true},
		{Name: "kill-restart", Label: "2. kill -9, restarted at once", Stop: &stopKill, Restart: true},
		{Name: "term-restart", Label: "3. SIGTERM, restarted at once", Stop: &stopTerm, Restart: true},
		{Name: "scale-out", Label: "4. a 4th instance joins", Stall: true, Pause: true, Handover: true},
		{Name: "stop", Label: "5. stopped for good", Leave: true},
	}
}

func (c *FailoverConfig) setDefaults() {
	if c.Instances == 0 {
		c.Instances = 3
	}
	if c.Partitions == 0 {
		c.Partitions = 12
	}
	if c.Rate == 0 {
		c.Rate = 4000
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 100 * time.Millisecond
	}
	if c.Repeat == 0 {
		c.Repeat = 5
	}
	if c.PollInterval == 0 {
		c.PollInterval = 100 * time.Millisecond
	}
	if c.EventTimeout == 0 {
		c.EventTimeout = 3 * time.Minute
	}
	if len(c.Scenarios) == 0 {
		for _, s := range Scenarios() {
			c.Scenarios = append(c.Scenarios, s.Name)
		}
	}
	if len(c.Contenders) == 0 {
		c.Contenders = []string{"eos"}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Validate reports a config that cannot run (after defaults).
func (c *FailoverConfig) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if c.Instances < 2 {
		errs = append(errs, fmt.Errorf("instances %d: want at least 2 (one stops)", c.Instances))
	}
	if c.Partitions < int32(c.Instances)+1 {
		errs = append(errs, fmt.Errorf("partitions %d: want more than the instances", c.Partitions))
	}
	if c.IDs < 0 || c.Rate <= 0 || c.Repeat <= 0 {
		errs = append(errs, errors.New("ids must not be negative, rate and repeat must be positive"))
	}
	if c.DupRate < 0 || c.DupRate > 0.5 {
		errs = append(errs, fmt.Errorf("duplicate rate %v: want 0..0.5", c.DupRate))
	}
	if c.SessionTimeout <= 0 || c.CommitInterval <= 0 || c.PollInterval <= 0 || c.EventTimeout <= 0 {
		errs = append(errs, errors.New("session timeout, commit interval, poll interval and event timeout must be positive"))
	}
	if c.Exe == "" || c.WorkDir == "" {
		errs = append(errs, errors.New("exe and work dir are required"))
	}
	var names []string
	for _, s := range Scenarios() {
		names = append(names, s.Name)
	}
	for _, n := range c.Scenarios {
		if !slices.Contains(names, n) {
			errs = append(errs, fmt.Errorf("scenario %q: want one of %v", n, names))
		}
	}
	names = names[:0]
	for _, ct := range FailoverContenders() {
		names = append(names, ct.Name)
	}
	for _, n := range c.Contenders {
		if !slices.Contains(names, n) {
			errs = append(errs, fmt.Errorf("contender %q: want one of %v", n, names))
		} else if k := failoverContender(n).Kind; !slices.Contains(contenders.Kinds, k) {
			errs = append(errs, fmt.Errorf("contender %q: this build has no contender kind %q", n, k))
		}
	}
	return errors.Join(errs...)
}

func failoverContender(name string) FailoverContender {
	for _, ct := range FailoverContenders() {
		if ct.Name == name {
			return ct
		}
	}
	panic("no failover contender " + name)
}

func (c *FailoverConfig) selected() ([]FailoverContender, []Scenario) {
	var cts []FailoverContender
	for _, n := range c.Contenders {
		cts = append(cts, failoverContender(n))
	}
	var scs []Scenario
	for _, s := range Scenarios() {
		if slices.Contains(c.Scenarios, s.Name) {
			scs = append(scs, s)
		}
	}
	return cts, scs
}

func (c *FailoverConfig) logf(format string, args ...any) {
	fmt.Fprintf(c.Log, "%s failover: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// columnLabel names a contender's column: its label and the table size.
func (c *FailoverConfig) columnLabel(ct FailoverContender) string {
	return fmt.Sprintf("%s, %s IDs", ct.Label, humanCount(c.IDs))
}

func humanCount(n int) string {
	switch {
	case n >= 1_000_000 && n%100_000 == 0:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e6), ".0") + "M"
	case n >= 1000 && n%100 == 0:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e3), ".0") + "k"
	}
	return fmt.Sprint(n)
}
