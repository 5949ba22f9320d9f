package kafkautil

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestTransient(t *testing.T) {
	msg := func(s string) *string { return &s }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		// What a killed broker looks like while it is still in the metadata.
		{"dial refused", fmt.Errorf("describe topic %q: %w", "orders", refused), true},
		{"connection reset", fmt.Errorf("describe topic %q: %w", "orders", reset), true},
		{"describe configs refused", fmt.Errorf("describe configs of orders: %w", refused), true},
		{"EOF", fmt.Errorf("create topic: %w", io.EOF), true},
		{"i/o timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{"no seed answered", fmt.Errorf("connect: %w", sarama.ErrOutOfBrokers), true},
		{"not connected", sarama.ErrNotConnected, true},
		{"controller unknown", sarama.ErrControllerNotAvailable, true},
		{"broker not available", sarama.ErrBrokerNotAvailable, true},
		{"leader not available", fmt.Errorf("describe topic %q: %w", "orders", sarama.ErrLeaderNotAvailable), true},
		{"not leader", sarama.ErrNotLeaderForPartition, true},
		{"not enough replicas", sarama.ErrNotEnoughReplicas, true},
		{"not enough replicas after append", sarama.ErrNotEnoughReplicasAfterAppend, true},
		{"request timed out", &sarama.TopicError{Err: sarama.ErrRequestTimedOut}, true},
		{"not controller", sarama.ErrNotController, true},
		{"metadata not propagated", &sarama.DescribeConfigError{Err: sarama.ErrUnknownTopicOrPartition}, true},
		{"rf: too few brokers registered (KRaft)", fmt.Errorf("create topic: %w", &sarama.TopicError{Err: sarama.ErrInvalidReplicationFactor,
			ErrMsg: msg("Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached because only 2 broker(s) are registered.")}), true},
		{"rf: all brokers fenced (KRaft)", &sarama.TopicError{Err: sarama.ErrInvalidReplicationFactor,
			ErrMsg: msg("Unable to replicate the partition 3 time(s): All brokers are currently fenced.")}, true},
		{"rf: larger than available brokers (ZooKeeper)", &sarama.TopicError{Err: sarama.ErrInvalidReplicationFactor,
			ErrMsg: msg("Replication factor: 3 larger than available brokers: 2.")}, true},

		// Configuration: no wait fixes these.
		{"input topic missing", fmt.Errorf("%w: %q", ErrNoInputTopic, "orders"), false},
		{"rf: invalid value", &sarama.TopicError{Err: sarama.ErrInvalidReplicationFactor,
			ErrMsg: msg("Replication factor must be larger than 0, or -1 to use the default value.")}, false},
		{"rf: no message", &sarama.TopicError{Err: sarama.ErrInvalidReplicationFactor}, false},
		{"invalid config", &sarama.TopicError{Err: sarama.ErrInvalidConfig, ErrMsg: msg("Invalid value x for configuration retention.ms")}, false},
		{"authorization", &sarama.TopicError{Err: sarama.ErrTopicAuthorizationFailed}, false},
		{"policy", sarama.ErrPolicyViolation, false},
		{"client config", sarama.ConfigurationError("Net.DialTimeout must be > 0"), false},
		{"strict retention", errors.New("--retention 1h0m0s is shorter than retention.ms (refused by --strict-retention)"), false},
		{"bad retention.ms", fmt.Errorf("retention.ms of orders is %q: %w", "x", errors.New("invalid syntax")), false},

		// Refused: the brokers or their certificates refused who is at either
		// end. sarama reports every seed failing so as ErrOutOfBrokers, which
		// alone is transient (a cluster that is down).
		{"SASL authentication failed on every seed", fmt.Errorf("connect: %w",
			sarama.Wrap(sarama.ErrOutOfBrokers, sarama.ErrSASLAuthenticationFailed)), false},
		{"SASL mechanism not enabled", sarama.Wrap(sarama.ErrOutOfBrokers, sarama.ErrUnsupportedSASLMechanism), false},
		{"broker certificate from an unknown CA", sarama.Wrap(sarama.ErrOutOfBrokers,
			&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), false},
		{"broker certificate for another name", sarama.Wrap(sarama.ErrOutOfBrokers,
			x509.HostnameError{Certificate: &x509.Certificate{}, Host: "kafka.example.com"}), false},
		{"listener not speaking TLS", sarama.Wrap(sarama.ErrOutOfBrokers, tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), false},
		{"TLS alert from the broker", sarama.Wrap(sarama.ErrOutOfBrokers, &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}), false},
		{"every seed down, one reset", sarama.Wrap(sarama.ErrOutOfBrokers, refused, io.ErrUnexpectedEOF), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transient(tc.err); got != tc.want {
				t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// records counts the Warn records Retry logs.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }
func (r *records) count() int                         { r.mu.Lock(); defer r.mu.Unlock(); return len(r.msgs) }

func TestRetrySequences(t *testing.T) {
	transient := fmt.Errorf("describe topic: %w", sarama.ErrLeaderNotAvailable)
	permanent := fmt.Errorf("%w: %q", ErrNoInputTopic, "orders")
	for _, tc := range []struct {
		name     string
		seq      []error // what the attempts return, in order
		wantErr  error   // nil: success
		attempts int
	}{
		{"first try", []error{nil}, nil, 1},
		{"transient then success", []error{transient, transient, nil}, nil, 3},
		{"config error at once", []error{permanent}, ErrNoInputTopic, 1},
		{"transient then config error", []error{transient, permanent}, ErrNoInputTopic, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &records{}
			n := 0
			err := Retry(context.Background(), slog.New(rec), "test", time.Minute, func() error {
				n++
				return tc.seq[n-1]
			})
			if !errors.Is(err, tc.wantErr) { // errors.Is(nil, nil) is true
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if n != tc.attempts {
				t.Errorf("%d attempts, want %d", n, tc.attempts)
			}
			if got := rec.count(); got != tc.attempts-1 { // every failed attempt but the last was retried
				t.Errorf("%d retries logged, want %d", got, tc.attempts-1)
			}
		})
	}
}

func TestRetryGivesUpAtDeadline(t *testing.T) {
	rec := &records{}
	n := 0
	start := time.Now()
	err := Retry(context.Background(), slog.New(rec), "test", 600*time.Millisecond, func() error {
		n++
		return sarama.ErrBrokerNotAvailable
	})
	if !errors.Is(err, sarama.ErrBrokerNotAvailable) {
		t.Fatalf("err = %v, want the last transient error wrapped", err)
	}
	if took := time.Since(start); took < 600*time.Millisecond || took > 5*time.Second {
		t.Errorf("gave up after %v, want just after the 600ms deadline", took)
	}
	// 250 ms + 350 ms (the rest of the deadline): three attempts, two retries logged.
	if n != 3 || rec.count() != 2 {
		t.Errorf("%d attempts and %d retries logged, want 3 and 2", n, rec.count())
	}
}

// An EOF from every seed may be a TLS mismatch, not a dead cluster: the
// retry log and the final error say so.
func TestRetryHintsAtTLSOnEOF(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	eof := fmt.Errorf("connect: %w", sarama.Wrap(sarama.ErrOutOfBrokers, io.ErrUnexpectedEOF))
	err := Retry(context.Background(), log, "test", 300*time.Millisecond, func() error { return eof })
	if err == nil || !strings.Contains(err.Error(), "expects TLS") {
		t.Fatalf("final error %v: want the TLS hint", err)
	}
	if !strings.Contains(logged.String(), "hint=") || !strings.Contains(logged.String(), "--tls") {
		t.Fatalf("retry log without the hint:\n%s", &logged)
	}
	logged.Reset()
	Retry(context.Background(), log, "test", 300*time.Millisecond, func() error { return sarama.ErrLeaderNotAvailable })
	if strings.Contains(logged.String(), "hint=") {
		t.Fatalf("a hint for an error that is not an EOF:\n%s", &logged)
	}
}

func TestRetryStopsWhenContextIsDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := Retry(ctx, slog.New(&records{}), "test", time.Minute, func() error {
		n++
		cancel()
		return sarama.ErrBrokerNotAvailable
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, sarama.ErrBrokerNotAvailable) {
		t.Fatalf("err = %v, want context.Canceled and the last error", err)
	}
	if n != 1 {
		t.Errorf("%d attempts after cancel, want 1", n)
	}
}

func TestRetryLog(t *testing.T) {
	unknown := fmt.Errorf("describe topic %q: %w", "g-table", sarama.ErrUnknownTopicOrPartition)
	for _, tc := range []struct {
		name   string
		err    error
		waited time.Duration
		want   slog.Level
	}{
		{"group topic not visible yet, first attempt", NotVisibleYet(unknown), 0, slog.LevelInfo},
		{"group topic not visible yet, after a few attempts", NotVisibleYet(unknown), 4 * time.Second, slog.LevelInfo},
		{"group topic still not visible", NotVisibleYet(unknown), settleGrace, slog.LevelWarn},
		{"config read of a new topic", NotVisibleYet(&sarama.DescribeConfigError{Err: sarama.ErrUnknownTopicOrPartition}), time.Second, slog.LevelInfo},
		{"unknown topic not known to exist", unknown, 0, slog.LevelWarn},
		{"broker down", fmt.Errorf("describe topic: %w", sarama.ErrBrokerNotAvailable), 0, slog.LevelWarn},
		{"leader moving", NotVisibleYet(sarama.ErrLeaderNotAvailable), 0, slog.LevelWarn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, msg := retryLog(tc.err, tc.waited); got != tc.want {
				t.Errorf("retryLog(%v, %v) = %v %q, want %v", tc.err, tc.waited, got, msg, tc.want)
			}
		})
	}
}

// levels records the level of every record Retry logs.
type levels struct {
	records
	mu  sync.Mutex
	got []slog.Level
}

func (l *levels) Handle(ctx context.Context, rec slog.Record) error {
	l.mu.Lock()
	l.got = append(l.got, rec.Level)
	l.mu.Unlock()
	return l.records.Handle(ctx, rec)
}

// Instances of a group starting together each find the table or loop topic
// another one created a moment ago missing from the metadata for an attempt
// or two: Retry logs that at Info, and still warns of anything else.
func TestRetryLogsTheGroupsOwnNewTopicsAtInfo(t *testing.T) {
	notVisible := NotVisibleYet(fmt.Errorf("describe topic %q: %w", "g-table", sarama.ErrUnknownTopicOrPartition))
	down := fmt.Errorf("describe topic: %w", sarama.ErrBrokerNotAvailable)
	for _, tc := range []struct {
		name string
		seq  []error
		want []slog.Level
	}{
		{"table not visible yet", []error{notVisible, notVisible, nil}, []slog.Level{slog.LevelInfo, slog.LevelInfo}},
		{"broker down, then the table not visible yet", []error{down, notVisible, nil}, []slog.Level{slog.LevelWarn, slog.LevelInfo}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &levels{}
			n := 0
			if err := Retry(context.Background(), slog.New(l), "prepare topics", time.Minute, func() error {
				n++
				return tc.seq[n-1]
			}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(l.got, tc.want) {
				t.Fatalf("levels %v, want %v", l.got, tc.want)
			}
		})
	}
}
