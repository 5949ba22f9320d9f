package services

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server on 127.0.0.1 without persistence (--save ”,
// appendonly no): the most favourable setup for the SET NX pattern.
type Redis struct {
	*server
	Addr    string
	Version string
}

// StartRedis starts redis-server with its working dir in dir (port 0: a
// free port) and waits until it answers PING.
func StartRedis(ctx context.Context, bin, dir string, port int) (*Redis, error) {
	port, err := FreePort(port)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--daemonize", "no", "--dir", dir, "--protected-mode", "no")
	logPath := filepath.Join(dir, "redis.log")
	s, err := start("redis-server", cmd, logPath)
	if err != nil {
		return nil, err
	}
	r := &Redis{server: s, Addr: fmt.Sprintf("127.0.0.1:%d", port), Version: version(bin)}
	up := func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: r.Addr, DialTimeout: time.Second})
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	if err := s.waitUp(ctx, 30*time.Second, up, logPath); err != nil {
		return nil, err
	}
	return r, nil
}

// Flush deletes every key (between runs).
func (r *Redis) Flush(ctx context.Context) error {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	return c.FlushAll(ctx).Err()
}

// Stop shuts redis-server down (SIGTERM).
func (r *Redis) Stop() error { return r.stop(syscall.SIGTERM) }
