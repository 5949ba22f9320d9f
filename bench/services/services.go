// Package services starts the throwaway Redis and PostgreSQL servers the
// benchmark's contenders need: Debian's packages, installed when missing,
// run on 127.0.0.1 with their data under a directory of the run, stopped by
// the harness afterwards.
package services

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Binaries are the server programs found on this machine.
type Binaries struct {
	Redis    string // redis-server
	Postgres string // postgres
	Initdb   string
}

// Find looks for redis-server on PATH and PostgreSQL in Debian's
// /usr/lib/postgresql/<version>/bin (the newest version) or on PATH.
func Find() (Binaries, []string) {
	var b Binaries
	var missing []string
	if p, err := exec.LookPath("redis-server"); err == nil {
		b.Redis = p
	} else {
		missing = append(missing, "redis-server")
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "postgres")) && isExec(filepath.Join(d, "initdb")) {
			b.Postgres, b.Initdb = filepath.Join(d, "postgres"), filepath.Join(d, "initdb")
			break
		}
	}
	if b.Postgres == "" {
		pg, err1 := exec.LookPath("postgres")
		ini, err2 := exec.LookPath("initdb")
		if err1 == nil && err2 == nil {
			b.Postgres, b.Initdb = pg, ini
		} else {
			missing = append(missing, "postgresql")
		}
	}
	return b, missing
}

func pgVersion(dir string) int {
	var v int
	fmt.Sscanf(filepath.Base(filepath.Dir(dir)), "%d", &v)
	return v
}

func isExec(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode()&0o111 != 0
}

// Ensure finds the servers and, when some are missing and install is set,
// installs Debian's redis-server and postgresql with apt-get (as root).
func Ensure(ctx context.Context, install bool, log io.Writer) (Binaries, error) {
	b, missing := Find()
	if len(missing) == 0 {
		return b, nil
	}
	if !install {
		return b, fmt.Errorf("not installed: %s", strings.Join(missing, ", "))
	}
	if os.Geteuid() != 0 {
		return b, fmt.Errorf("not installed: %s (and not root, so apt-get cannot install them)", strings.Join(missing, ", "))
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return b, fmt.Errorf("not installed: %s (and no apt-get)", strings.Join(missing, ", "))
	}
	fmt.Fprintf(log, "services: installing redis-server postgresql with apt-get\n")
	for _, args := range [][]string{{"update", "-q"}, {"install", "-y", "-q", "redis-server", "postgresql"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return b, fmt.Errorf("apt-get %s: %w", args[0], err)
		}
	}
	b, missing = Find()
	if len(missing) > 0 {
		return b, fmt.Errorf("still missing after apt-get: %s", strings.Join(missing, ", "))
	}
	return b, nil
}

// FreePort returns port when it is not 0, else a free TCP port on 127.0.0.1.
func FreePort(port int) (int, error) {
	if port != 0 {
		return port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// server is a started child process.
type server struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

func start(name string, cmd *exec.Cmd, logPath string) (*server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() { // owns Wait; ends when the process does
		err := cmd.Wait()
		logf.Close()
		s.done <- err
	}()
	return s, nil
}

// Pid is the server's process id.
func (s *server) Pid() int { return s.cmd.Process.Pid }

// stop sends sig and waits up to 30 s, then kills.
func (s *server) stop(sig syscall.Signal) error {
	select {
	case err := <-s.done:
		return fmt.Errorf("%s had exited: %v", s.name, err)
	default:
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("%s ignored %v for 30s; killed", s.name, sig)
	}
}

// waitUp polls up until it succeeds, the process exits or timeout passes.
func (s *server) waitUp(ctx context.Context, timeout time.Duration, up func(context.Context) error, logPath string) error {
	deadline := time.Now().Add(timeout)
	for {
		err := up(ctx)
		if err == nil {
			return nil
		}
		select {
		case werr := <-s.done:
			s.done <- werr
			tail, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s exited during start (%v): %s", s.name, werr, lastLines(string(tail), 10))
		default:
		}
		if time.Now().After(deadline) {
			_ = s.stop(syscall.SIGKILL)
			return fmt.Errorf("%s not up after %v: %w", s.name, timeout, err)
		}
		select {
		case <-ctx.Done():
			_ = s.stop(syscall.SIGKILL)
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// version runs bin --version and returns its first line.
func version(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}
