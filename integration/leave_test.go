package integration

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dedupkit/dedup/processor"
)

// leaveSession is the group session timeout of the leave tests: long, so
// that a hand-over by the session timeout cannot pass for one by leaving.
const leaveSession = 45 * time.Second

// handOver is how soon the instance that stays must have committed the
// events written after the other one stopped for good: far below
// leaveSession, with room for what a hand-over takes. The instance that
// stays learns of the rebalance at its next heartbeat, a fifth of the
// session timeout (9 s here), then rejoins, restores and commits: 8-9.5 s
// in the runs so far.
const handOver = 20 * time.Second

// Two instances of a group with static membership; one is stopped for
// good, through Config.Group.LeaveOnStop or Processor.LeaveGroupOnStop. It
// leaves the group once it has closed, so the other instance takes all
// partitions and commits the events written after the stop well before
// the session timeout; without the leave the stopped instance's partitions
// wait out the 45 s session. The output is exactly-once.
func TestStopForGoodHandsThePartitionsOverAtOnce(t *testing.T) {
	tests := []struct {
		name string
		cfg  processor.Config // of the instance that is stopped
		ask  bool             // Processor.LeaveGroupOnStop before the stop
	}{
		{"Config.Group.LeaveOnStop", processor.Config{Group: processor.Group{LeaveOnStop: true}}, false},
		{"Processor.LeaveGroupOnStop", processor.Config{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, 4)
			group := e.group("leave")
			var ca, cb counter
			tt.cfg.StateDir, tt.cfg.Group.SessionTimeout, tt.cfg.InstanceID = t.TempDir(), leaveSession, "leave-a"
			a := e.startEOS(e.topology(group, &ca), tt.cfg)
			until(t, 60*time.Second, "instance A to be assigned", a.ready)
			b := e.startEOS(e.topology(group, &cb), processor.Config{StateDir: t.TempDir(), Group: processor.Group{SessionTimeout: leaveSession}, InstanceID: "leave-b"})
			until(t, 60*time.Second, "both instances to be assigned", func() bool { return a.ready() && b.ready() })
			before := events("before", 60)
			e.produce(before...)
			e.waitProcessed(group)
			pa, _ := ca.counts()
			pb, _ := cb.counts()
			if pa == 0 || pb == 0 {
				t.Fatalf("processed %d by A and %d by B: both must hold partitions before A stops", pa, pb)
			}

			if tt.ask {
				a.leave()
			}
			a.stop(t)
			stopped := time.Now()
			// Run returned after the leave: the coordinator lists B alone.
			if m := groupMembers(t, e.brokers, group); len(m) != 1 || m[0] != group+"-leave-b-0" {
				t.Errorf("group members after A's stop: %v, want B's alone", m)
			}
			after := events("after", 60)
			e.produce(after...)
			if err := e.processedWithin(group, handOver); err != nil {
				t.Fatalf("instance B did not take A's partitions and commit within %v of A's stop "+
					"(session timeout %v): %v", handOver, leaveSession, err)
			}
			t.Logf("B committed every event written after A's stop %v after it", time.Since(stopped).Round(10*time.Millisecond))
			e.exactlyOnce(append(before, after...))
		})
	}
}

// The binary's two ways to stop for good: SIGTERM with
// --leave-group-on-stop (here from its environment variable), and SIGUSR1
// without it. The instance that stays commits the events written after
// the stop well before the session timeout, and the output is
// exactly-once.
func TestWorkerBinaryStopForGood(t *testing.T) {
	bin := buildProcessor(t)
	tests := []struct {
		name string
		env  string // PROCESSOR_LEAVE_GROUP_ON_STOP of the instance that stops, "" unset
		sig  syscall.Signal
	}{
		{"SIGTERM with PROCESSOR_LEAVE_GROUP_ON_STOP", "true", syscall.SIGTERM},
		{"SIGUSR1", "", syscall.SIGUSR1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, 4)
			group := e.group("leave-bin")
			session := "--session-timeout=" + leaveSession.String()
			if tt.env != "" {
				t.Setenv("PROCESSOR_LEAVE_GROUP_ON_STOP", tt.env)
			}
			a := startProc(t, bin, workerArgs(e, group, t.TempDir(), session, "--instance-id", "leave-a")...)
			a.waitHealth("/readyz", 200, 60*time.Second, nil)
			t.Setenv("PROCESSOR_LEAVE_GROUP_ON_STOP", "false")
			b := startProc(t, bin, workerArgs(e, group, t.TempDir(), session, "--instance-id", "leave-b")...)
			b.waitHealth("/readyz", 200, 60*time.Second, nil)
			a.waitHealth("/readyz", 200, 60*time.Second, nil)
			before := events("before", 60)
			e.produce(before...)
			e.waitProcessed(group)
			for name, p := range map[string]*proc{"A": a, "B": b} {
				if n := p.metric("dedup_events_processed_total"); n == 0 {
					t.Fatalf("%s processed nothing: both must hold partitions before A stops", name)
				}
			}

			a.stopWith(tt.sig)
			stopped := time.Now()
			if logs := a.logs.String(); !strings.Contains(logs, "left the consumer group") {
				t.Errorf("A's log does not say it left the group\n%s", tail(logs, 20))
			}
			after := events("after", 60)
			e.produce(after...)
			if err := e.processedWithin(group, handOver); err != nil {
				t.Fatalf("instance B did not take A's partitions and commit within %v of A's stop "+
					"(session timeout %v): %v\n%s", handOver, leaveSession, err, tail(b.logs.String(), 30))
			}
			t.Logf("B committed every event written after A's stop %v after it (B's rebalances: %v)",
				time.Since(stopped).Round(10*time.Millisecond), b.metric("dedup_rebalances_total"))
			e.exactlyOnce(append(before, after...))
			b.term()
		})
	}
}

// goka's best-effort members are dynamic (no group.instance.id): sarama
// sends LeaveGroup when one closes, so once a stopped runner's Run has
// returned the coordinator lists only the other instance. A static member
// would stay listed for the session timeout.
func TestBestEffortStopLeavesTheGroup(t *testing.T) {
	e := newEnv(t, 4)
	group := e.group("leave-be")
	a := e.start(e.topology(group, &counter{}), t.TempDir())
	b := e.start(e.topology(group, &counter{}), t.TempDir())
	until(t, 60*time.Second, "both instances to hold partitions", func() bool {
		return a.partitionsHeld() > 0 && b.partitionsHeld() > 0 && len(groupMembers(t, e.brokers, group)) == 2
	})
	a.stop(t)
	if m := groupMembers(t, e.brokers, group); len(m) != 1 {
		t.Fatalf("group members after A's stop: %v, want B's alone", m)
	}
}

// groupMembers is the client IDs of group's members as its coordinator
// lists them (an exactly-once member's is its member name).
func groupMembers(t *testing.T, brokers []string, group string) []string {
	t.Helper()
	var ids []string
	for _, m := range describeGroup(t, brokers, group).Members {
		ids = append(ids, m.ClientId)
	}
	slices.Sort(ids)
	return ids
}
