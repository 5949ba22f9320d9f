// Package postgres_test checks the PostgreSQL server `make test` starts with
// postgres.sh: that the tests get the durable server they are written for,
// and that the script's commands do what `make test` and a developer rely on.
package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/pgtest"
)

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func show(t *testing.T, db *sql.DB, setting string) string {
	t.Helper()
	var v string
	if err := db.QueryRowContext(t.Context(), "SHOW "+setting).Scan(&v); err != nil {
		t.Fatalf("SHOW %s: %v", setting, err)
	}
	return v
}

// The inbox's claim is only worth its transaction if a commit survives a
// crash: the server the tests run against keeps PostgreSQL's durable
// defaults, so they test what production runs.
func TestServerIsDurable(t *testing.T) {
	db := open(t, pgtest.DSN(t))
	for _, setting := range []string{"fsync", "synchronous_commit"} {
		if v := show(t, db, setting); v != "on" {
			t.Errorf("SHOW %s = %q, want on", setting, v)
		}
	}
}

// script runs postgres.sh with its own data dir and port, so it never
// touches the server `make test` started.
type script struct {
	t    *testing.T
	data string
	port int
	env  []string
}

func newScript(t *testing.T) *script {
	t.Helper()
	if os.Getenv(pgtest.DSNEnv) == "" {
		kafkatest.Missing(t, "%s is not set: integration tier only (it starts a second local server)", pgtest.DSNEnv)
	}
	if found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(found) == 0 {
		if _, err := exec.LookPath("initdb"); err != nil {
			kafkatest.Missing(t, "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb, no initdb on PATH)")
		}
	}
	s := &script{t: t, data: filepath.Join(t.TempDir(), "pg"), port: freePort(t)}
	s.env = append(os.Environ(), "POSTGRES_DATA="+s.data, "POSTGRES_PORT="+strconv.Itoa(s.port))
	t.Cleanup(func() {
		if out, err := s.cmd("clean").CombinedOutput(); err != nil {
			t.Errorf("postgres.sh clean: %v\n%s", err, out)
		}
	})
	return s
}

// cmd runs in its own process group, killed whole when it overruns: a hung
// postgres.sh must not leave children behind.
func (s *script) cmd(args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	c := exec.CommandContext(ctx, "./postgres.sh", args...)
	c.Env = s.env
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = 5 * time.Second
	s.t.Cleanup(cancel)
	return c
}

func (s *script) run(args ...string) string {
	s.t.Helper()
	out, err := s.cmd(args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("postgres.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (s *script) status(want string) {
	s.t.Helper()
	st := strings.TrimSpace(s.run("status"))
	if !strings.HasSuffix(st, " "+want) {
		s.t.Fatalf("postgres.sh status = %q, want it to end in %q", st, want)
	}
}

// freePort is a port free now and below the kernel's ephemeral range, which
// postgres.sh refuses.
func freePort(t *testing.T) int {
	t.Helper()
	for range 200 {
		p := 20000 + rand.IntN(12000) // 20000-31999: below 32768
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port in 20000-31999 after 200 tries")
	return 0
}

// up, status, dsn, down, up again on the same cluster, clean: what `make
// test` does with the script, and what a developer does between runs. As
// root the data dir sits under the test's 0700 temp dir, which the postgres
// user cannot reach: the cluster then lives in /var/tmp, and clean deletes
// it too.
func TestScriptUpDownClean(t *testing.T) {
	s := newScript(t)
	s.status("dead")
	s.run("up")
	s.status("alive")
	if out := s.run("up"); !strings.Contains(out, "already running") {
		t.Fatalf("a second up did not find the running server:\n%s", out)
	}

	dsn := strings.TrimSpace(s.run("dsn"))
	db := open(t, dsn)
	for _, setting := range []string{"fsync", "synchronous_commit"} {
		if v := show(t, db, setting); v != "on" {
			t.Errorf("SHOW %s = %q, want on", setting, v)
		}
	}
	if v := show(t, db, "listen_addresses"); v != "127.0.0.1" {
		t.Errorf("SHOW listen_addresses = %q, want 127.0.0.1", v)
	}
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE kept (id int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s.run("down")
	s.status("dead")
	s.run("up") // the same cluster: the table is still there
	s.status("alive")
	var id int
	if err := open(t, dsn).QueryRowContext(t.Context(), "SELECT id FROM kept").Scan(&id); err != nil || id != 42 {
		t.Fatalf("after down and up: SELECT id FROM kept = %d, %v; want 42 from the same cluster", id, err)
	}

	env, err := os.ReadFile(filepath.Join(s.data, "cluster.env"))
	if err != nil {
		t.Fatal(err)
	}
	base := s.data
	for _, line := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(line, "BASE="); ok {
			base = v
		}
	}
	s.run("clean")
	s.status("dead")
	for _, dir := range []string{s.data, base} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("after clean: %s still exists (%v)", dir, err)
		}
	}
	if out := s.run("clean"); out != "" { // nothing left: a no-op
		t.Errorf("a second clean said %q", out)
	}
}

// A port taken by someone else is refused at once with the reason, before
// initdb, not left to a bind error in the server's log.
func TestScriptUpRefusesATakenPort(t *testing.T) {
	s := newScript(t)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(s.port))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out, err := s.cmd("up").CombinedOutput()
	if err == nil {
		t.Fatalf("postgres.sh up on a taken port succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("port %d is taken", s.port)) {
		t.Fatalf("postgres.sh up on a taken port failed without naming the port:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(s.data, "cluster")); !os.IsNotExist(err) {
		t.Errorf("postgres.sh up on a taken port made a cluster first (%v)", err)
	}
}
