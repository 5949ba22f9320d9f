package harness

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dedupkit/dedup/bench/contenders"
	"github.com/dedupkit/dedup/bench/procstat"
)

// child is a running contender process.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	ready   chan struct{}
	done    chan error
	// restored: from the RESTORED line, set before ready is closed.
	restoredRecords int64
	restoredSeconds float64
	// commits: from the COMMITS line, set before done is sent.
	commits       int
	commitSeconds float64
	commitRecords int
	// inbox: from the INBOX line (postgres-inbox), set before done is sent.
	inbox contenders.InboxStats
}

// startChild runs `Exe ExeArgs... contender args...`, in the memory cgroup
// cg unless nil; its stderr goes to logPath, its stdout is read for READY
// and RESTORED.
func (h *harness) startChild(name string, args []string, logPath string, cg *memCgroup) (*child, error) {
	exe, full := h.cfg.Exe, append(append(append([]string{}, h.cfg.ExeArgs...), "contender"), args...)
	if cg != nil {
		exe, full = cg.wrap(exe, full)
	}
	cmd := exec.Command(exe, full...)
	cmd.Env = append(os.Environ(), h.cfg.ExeEnv...)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, logPath: logPath, ready: make(chan struct{}), done: make(chan error, 1)}
	go func() { // owns stdout and Wait; ends when the process does
		sc := bufio.NewScanner(stdout)
		readyClosed := false
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 3 && f[0] == contenders.LineRestored:
				c.restoredRecords, _ = strconv.ParseInt(f[1], 10, 64)
				c.restoredSeconds, _ = strconv.ParseFloat(f[2], 64)
			case len(f) == 4 && f[0] == contenders.LineCommits:
				c.commits, _ = strconv.Atoi(f[1])
				c.commitSeconds, _ = strconv.ParseFloat(f[2], 64)
				c.commitRecords, _ = strconv.Atoi(f[3])
			case len(f) == 6 && f[0] == contenders.LineInbox:
				c.inbox.Events, _ = strconv.ParseInt(f[1], 10, 64)
				c.inbox.HandleSeconds, _ = strconv.ParseFloat(f[2], 64)
				c.inbox.UpsertSeconds, _ = strconv.ParseFloat(f[3], 64)
				c.inbox.Commits, _ = strconv.ParseUint(f[4], 10, 64)
				c.inbox.CommitSeconds, _ = strconv.ParseFloat(f[5], 64)
			case len(f) == 1 && f[0] == contenders.LineReady && !readyClosed:
				readyClosed = true
				close(c.ready)
			}
		}
		err := cmd.Wait()
		logf.Close()
		c.done <- err
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// waitReady waits for READY; an exit or the timeout is an error.
func (c *child) waitReady(timeout time.Duration) error {
	select {
	case <-c.ready:
		return nil
	case err := <-c.done:
		c.done <- err
		return fmt.Errorf("%s exited before it was ready (%v); log: %s", c.name, err, tailFile(c.logPath, 15))
	case <-time.After(timeout):
		return fmt.Errorf("%s not ready after %v; log: %s", c.name, timeout, tailFile(c.logPath, 15))
	}
}

// exited reports a child that ended on its own.
func (c *child) exited() error {
	select {
	case err := <-c.done:
		c.done <- err
		return fmt.Errorf("%s exited during the run (%v); log: %s", c.name, err, tailFile(c.logPath, 15))
	default:
		return nil
	}
}

// stop sends SIGTERM (a clean shutdown: final commit) and waits up to a
// minute, then kills.
func (c *child) stop() error { return c.signalStop(syscall.SIGTERM) }

// signalStop sends sig and waits up to a minute for the process to end,
// then kills it. A SIGKILL's exit status is no error: it was asked for.
func (c *child) signalStop(sig syscall.Signal) error {
	select {
	case err := <-c.done:
		c.done <- err
		return nil
	default:
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case err := <-c.done:
		c.done <- err
		if err != nil && sig != syscall.SIGKILL {
			return fmt.Errorf("%s: %w; log: %s", c.name, err, tailFile(c.logPath, 10))
		}
		return nil
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		err := <-c.done
		c.done <- err
		return fmt.Errorf("%s ignored %v for a minute; killed", c.name, sig)
	}
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// cpuReadings are the CPU times of every process the harness watches.
type cpuReadings struct {
	child, broker, redis, postgres procstat.CPU
}

func (h *harness) readCPU(c *child) cpuReadings {
	var r cpuReadings
	r.child, _ = procstat.ReadCPU(c.pid())
	if h.brokerPID > 0 {
		r.broker, _ = procstat.ReadCPU(h.brokerPID)
	}
	if h.redis != nil {
		r.redis, _ = procstat.ReadCPU(h.redis.Pid())
	}
	if h.postgres != nil {
		r.postgres, _ = procstat.ReadTreeCPU(h.postgres.Pid())
	}
	return r
}
