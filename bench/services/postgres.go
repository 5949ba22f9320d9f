package services

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a PostgreSQL server on 127.0.0.1 with a fresh cluster in a
// directory of the run and the stock settings (fsync and synchronous_commit
// on: a processed_messages table is only worth having if it is durable).
type Postgres struct {
	*server
	DSN     string
	Version string
	ownDir  string // removed by Stop
}

// StartPostgres runs initdb into dir/data and starts postgres on port (0: a
// free port). PostgreSQL refuses to run as root, so as root both run as the
// "postgres" user that Debian's package creates.
func StartPostgres(ctx context.Context, b Binaries, dir string, port int) (*Postgres, error) {
	port, err := FreePort(port)
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	superuser := "postgres"
	var data, own string
	if cred != nil {
		// The data dir must be reachable by that user, and the run dir may sit
		// under a 0700 temp dir: use a directory of its own under the system
		// temp dir (removed by Stop), and keep the log in dir.
		if own, err = os.MkdirTemp("", "dedup-bench-pg-"); err != nil {
			return nil, err
		}
		data = filepath.Join(own, "data")
		if err := os.Chmod(own, 0o755); err != nil {
			return nil, err
		}
		if err := os.Mkdir(data, 0o700); err != nil {
			return nil, err
		}
		if err := os.Chown(data, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	} else {
		data = filepath.Join(dir, "data")
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		if u, err := user.Current(); err == nil {
			superuser = u.Username
		}
	}
	fail := func(err error) (*Postgres, error) {
		if own != "" {
			os.RemoveAll(own)
		}
		return nil, err
	}
	initdb := exec.CommandContext(ctx, b.Initdb, "-D", data, "-U", superuser, "--auth=trust", "--no-sync", "-E", "UTF8")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %w: %s", err, lastLines(string(out), 10)))
	}
	cmd := exec.Command(b.Postgres, "-D", data, "-p", strconv.Itoa(port), "-k", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=100")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	logPath := filepath.Join(dir, "postgres.log")
	s, err := start("postgres", cmd, logPath)
	if err != nil {
		return fail(err)
	}
	p := &Postgres{server: s, Version: version(b.Postgres), ownDir: own,
		DSN: fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", superuser, port)}
	up := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, p.DSN)
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	}
	if err := s.waitUp(ctx, 60*time.Second, up, logPath); err != nil {
		return fail(err)
	}
	return p, nil
}

// postgresCredential is the "postgres" user when running as root, nil
// otherwise (then the servers run as the current user).
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and there is no postgres user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Stop shuts PostgreSQL down (SIGINT: fast shutdown).
func (p *Postgres) Stop() error {
	err := p.stop(syscall.SIGINT)
	if p.ownDir != "" {
		os.RemoveAll(p.ownDir)
	}
	return err
}
