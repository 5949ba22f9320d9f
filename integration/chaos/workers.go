package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

var listenRE = regexp.MustCompile(`msg="http listening" addr=(\S+)`)

// proc is one incarnation of a worker: a `processor run` child process whose
// stderr goes to its own log file.
type proc struct {
	slot, inc int
	cmd       *exec.Cmd
	logPath   string
	base      string        // http://host:port of /metrics
	exited    chan struct{} // closed once reaped; err is then set
	err       error
	expected  bool // the driver signalled its end (guarded by fleet.mu)
	served    bool // it started serving HTTP (guarded by fleet.mu)
}

// fleet runs up to n worker instances ("slots"). Slot i keeps its state dir
// across incarnations, and so its instance id, unless it is wiped. A worker
// that exits on its own is a crash: it is logged, counted and restarted.
type fleet struct {
	bin, dir string
	args     []string // `run` flags shared by every instance
	proxied  []string // more flags for w1 (slot 0): its brokers through the fault proxy
	log      func(format string, args ...any)

	mu      sync.Mutex
	procs   []*proc // by slot; nil when not running
	wanted  []bool  // by slot: should be running
	incs    []int   // incarnations started, by slot
	crashes []crash
	crashed chan struct{} // a wake-up for supervise, capacity 1
}

// crash is a worker exit the driver did not cause.
type crash struct {
	slot, inc int
	err       error
	logPath   string
	lastLine  string // the worker's last log line: usually why it stopped
	atStart   bool   // it never served: it failed while starting up
}

func newFleet(bin, dir string, slots int, args []string, log func(string, ...any)) *fleet {
	return &fleet{bin: bin, dir: dir, args: args, log: log, procs: make([]*proc, slots),
		wanted: make([]bool, slots), incs: make([]int, slots), crashed: make(chan struct{}, 1)}
}

func (f *fleet) stateDir(slot int) string {
	return filepath.Join(f.dir, "state", fmt.Sprintf("w%d", slot+1))
}

// start starts slot's next incarnation and waits until it serves HTTP.
func (f *fleet) start(slot int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.startLocked(slot)
}

func (f *fleet) startLocked(slot int) error {
	if f.procs[slot] != nil {
		return fmt.Errorf("w%d is already running", slot+1)
	}
	f.wanted[slot] = true
	f.incs[slot]++
	p := &proc{slot: slot, inc: f.incs[slot], exited: make(chan struct{}),
		logPath: filepath.Join(f.dir, "workers", fmt.Sprintf("w%d-%03d.log", slot+1, f.incs[slot]))}
	if err := os.MkdirAll(filepath.Dir(p.logPath), 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return err
	}
	args := append([]string{"run", "--http-addr", "127.0.0.1:0", "--state-dir", f.stateDir(slot)}, f.args...)
	if slot == 0 {
		args = append(args, f.proxied...)
	}
	p.cmd = exec.Command(f.bin, args...)
	fmt.Fprintf(logFile, "# %s %s\n", f.bin, strings.Join(args, " "))
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		return err
	}
	p.cmd.Stdout = logFile
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start w%d: %w", slot+1, err)
	}
	addr := make(chan string, 1)
	// Owned by the process: it ends when the process has exited.
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if m := listenRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		io.Copy(logFile, stderr)
		p.err = p.cmd.Wait()
		fmt.Fprintf(logFile, "# exited: %v\n", p.err)
		logFile.Close()
		close(p.exited)
		f.exited(p)
	}()
	f.procs[slot] = p
	select {
	case a := <-addr:
		p.base, p.served = "http://"+a, true
		return nil
	case <-p.exited:
		f.procs[slot] = nil // exited records it as a crash, so supervise retries
		return fmt.Errorf("w%d (incarnation %d) exited at start: %v; see %s", slot+1, p.inc, p.err, p.logPath)
	case <-time.After(90 * time.Second):
		return fmt.Errorf("w%d (incarnation %d) did not serve HTTP within 90s; see %s", slot+1, p.inc, p.logPath)
	}
}

// exited runs when a process is reaped; an exit the driver did not cause is
// recorded as a crash for supervise.
func (f *fleet) exited(p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.procs[p.slot] == p {
		f.procs[p.slot] = nil
	}
	if p.expected {
		return
	}
	f.crashes = append(f.crashes, crash{slot: p.slot, inc: p.inc, err: p.err, logPath: p.logPath, lastLine: lastLogLine(p.logPath), atStart: !p.served})
	select {
	case f.crashed <- struct{}{}:
	default:
	}
}

// lastLogLine returns the last line of a worker log that the driver did not
// write itself.
func lastLogLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if !strings.HasPrefix(lines[i], "# ") {
			return lines[i]
		}
	}
	return ""
}

// supervise restarts crashed workers that should be running, until ctx is done.
func (f *fleet) supervise(ctx context.Context) {
	seen := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.crashed:
		}
		f.mu.Lock()
		news := f.crashes[seen:]
		seen = len(f.crashes)
		f.mu.Unlock()
		for _, c := range news {
			what := "CRASH"
			if c.atStart {
				what = "START FAILED"
			}
			f.log("%s w%d incarnation %d exited by itself: %v: %s (log %s)", what, c.slot+1, c.inc, c.err, c.lastLine, c.logPath)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second): // restart back-off, as a supervisor would
		}
		f.mu.Lock()
		for _, c := range news {
			if f.wanted[c.slot] && f.procs[c.slot] == nil {
				if err := f.startLocked(c.slot); err != nil {
					f.log("restart of w%d failed: %v", c.slot+1, err)
				} else {
					f.log("restarted w%d as incarnation %d", c.slot+1, f.incs[c.slot])
				}
			}
		}
		f.mu.Unlock()
	}
}

// kill SIGKILLs slot's process and waits until it is reaped. The slot stays
// wanted: the caller restarts it.
func (f *fleet) kill(slot int) (*proc, error) {
	f.mu.Lock()
	p := f.procs[slot]
	if p == nil {
		f.mu.Unlock()
		return nil, fmt.Errorf("w%d is not running", slot+1)
	}
	p.expected = true
	f.mu.Unlock()
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.exited
	f.reap(p)
	return p, nil
}

// reap clears slot's entry once p has exited (exited does too; whichever
// runs first).
func (f *fleet) reap(p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.procs[p.slot] == p {
		f.procs[p.slot] = nil
	}
}

// term stops slot gracefully (SIGTERM; SIGKILL after a minute) and marks it
// not wanted. It returns the exit error.
func (f *fleet) term(slot int) (*proc, error) {
	f.mu.Lock()
	p := f.procs[slot]
	if p == nil {
		f.wanted[slot] = false
		f.mu.Unlock()
		return nil, nil
	}
	p.expected = true
	f.wanted[slot] = false
	f.mu.Unlock()
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		f.reap(p)
		return p, p.err
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		<-p.exited
		f.reap(p)
		return p, fmt.Errorf("w%d did not stop within a minute of SIGTERM; killed", slot+1)
	}
}

// signal sends sig (SIGSTOP, SIGCONT) to slot's process.
func (f *fleet) signal(slot int, sig syscall.Signal) (*proc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.procs[slot]
	if p == nil {
		return nil, fmt.Errorf("w%d is not running", slot+1)
	}
	return p, p.cmd.Process.Signal(sig)
}

// wipe deletes slot's state dir; the slot must be stopped.
func (f *fleet) wipe(slot int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.procs[slot] != nil {
		return fmt.Errorf("w%d is running", slot+1)
	}
	return os.RemoveAll(f.stateDir(slot))
}

// running lists the slots with a live process.
func (f *fleet) running() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for i, p := range f.procs {
		if p != nil {
			out = append(out, i)
		}
	}
	return out
}

// wantedSlots lists the slots that should be running (a crashed one is
// about to be restarted).
func (f *fleet) wantedSlots() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for i, w := range f.wanted {
		if w {
			out = append(out, i)
		}
	}
	return out
}

// idle lists the slots that are neither running nor wanted.
func (f *fleet) idle() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for i, p := range f.procs {
		if p == nil && !f.wanted[i] {
			out = append(out, i)
		}
	}
	return out
}

func (f *fleet) crashList() []crash {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]crash(nil), f.crashes...)
}

func (f *fleet) incarnations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, i := range f.incs {
		n += i
	}
	return n
}

// stopAll stops every worker gracefully and reports unclean exits.
func (f *fleet) stopAll() []string {
	var problems []string
	for slot := range f.procs {
		if p, err := f.term(slot); err != nil {
			problems = append(problems, fmt.Sprintf("w%d incarnation %d: %v (log %s)", slot+1, p.inc, err, p.logPath))
		}
	}
	return problems
}

// metric returns the sum of a metric family's samples on slot's /metrics.
func (f *fleet) metric(slot int, name string) (float64, error) {
	f.mu.Lock()
	p := f.procs[slot]
	f.mu.Unlock()
	if p == nil {
		return 0, fmt.Errorf("w%d is not running", slot+1)
	}
	return scrape(p.base, name)
}

func scrape(base, name string) (float64, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	sum := 0.0
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", name, err)
		}
		sum += v
	}
	return sum, nil
}
