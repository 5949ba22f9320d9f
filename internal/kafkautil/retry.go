package kafkautil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
)

// StartupTimeout bounds how long a worker's startup steps (creating topics,
// reading the input's retention) wait out transient broker errors before the
// worker exits. A killed broker stays in the cluster metadata, and may be
// named as the controller, until the controller fences it
// (broker.session.timeout.ms, 9 s by default) and partition leaders move;
// a broker restart takes tens of seconds more. Two minutes covers both with
// room to spare, yet a cluster that is really gone or a wrong --brokers list
// still ends in an exit that an orchestrator sees, not in a silent hang.
const StartupTimeout = 2 * time.Minute

// Backoff between attempts of Retry: doubled after each failure, up to the cap.
const (
	firstBackoff = 250 * time.Millisecond
	maxBackoff   = 5 * time.Second
)

// transientKErrors are broker answers that a later attempt can get past:
// a broker or leader that is down or moving, too few in-sync replicas for
// the moment, a timeout, a controller that moved, and metadata that has not
// yet reached the broker asked.
var transientKErrors = []sarama.KError{
	sarama.ErrBrokerNotAvailable,
	sarama.ErrLeaderNotAvailable,
	sarama.ErrNotLeaderForPartition,
	sarama.ErrReplicaNotAvailable,
	sarama.ErrNotEnoughReplicas,
	sarama.ErrNotEnoughReplicasAfterAppend,
	sarama.ErrRequestTimedOut,
	sarama.ErrNetworkException,
	sarama.ErrNotController,
	sarama.ErrUnknownTopicOrPartition,
	sarama.ErrKafkaStorageError,
	sarama.ErrThrottlingQuotaExceeded,
	sarama.ErrOffsetsLoadInProgress,
	sarama.ErrConsumerCoordinatorNotAvailable,
	sarama.ErrNotCoordinatorForConsumer,
}

// Transient reports whether err is one that retrying the same request can
// clear: a broker that cannot be reached or reset the connection, one of
// transientKErrors, or INVALID_REPLICATION_FACTOR because too few brokers are
// registered or unfenced right now. Everything else — a missing input topic
// (ErrNoInputTopic), an existing topic that does not fit the group
// (ErrTopicMismatch), an invalid config, an authorization failure, a nonsense
// replication factor, a failed authentication (Refused) — is a configuration
// error that no wait will fix.
func Transient(err error) bool {
	if err == nil || errors.Is(err, ErrNoInputTopic) || errors.Is(err, ErrTopicMismatch) || Refused(err) {
		return false
	}
	if errors.Is(err, sarama.ErrInvalidReplicationFactor) {
		return tooFewBrokers(err)
	}
	for _, k := range transientKErrors {
		if errors.Is(err, k) {
			return true
		}
	}
	if errors.Is(err, sarama.ErrOutOfBrokers) || errors.Is(err, sarama.ErrNotConnected) ||
		errors.Is(err, sarama.ErrControllerNotAvailable) || errors.Is(err, sarama.ErrIncompleteResponse) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var opErr *net.OpError // dial, read or write to a broker failed
	if errors.As(err, &opErr) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// refusals are broker answers about who the client is: failed SASL
// authentication, and a missing ACL (authorization).
var refusals = []error{
	sarama.ErrSASLAuthenticationFailed, sarama.ErrUnsupportedSASLMechanism, sarama.ErrIllegalSASLState,
	sarama.ErrTopicAuthorizationFailed, sarama.ErrGroupAuthorizationFailed, sarama.ErrClusterAuthorizationFailed,
	sarama.ErrTransactionalIDAuthorizationFailed,
}

// Refused reports an error about who is at either end, not about the
// network: the brokers rejected the SASL credentials or mechanism, or the
// user lacks an ACL for what was asked; or the broker's certificate is not
// trusted or not for its name, the broker is not speaking TLS, or it sent a
// TLS alert (a client certificate it wants or rejects). sarama reports a
// connection that failed this way on every seed broker as ErrOutOfBrokers,
// which alone would read as a cluster that is down. No retry fixes a wrong
// password or a missing ACL, so the worker stops with the reason instead of
// retrying for StartupTimeout (at start) or forever (running).
func Refused(err error) bool {
	for _, r := range refusals {
		if errors.Is(err, r) {
			return true
		}
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		header    tls.RecordHeaderError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &header) {
		return true
	}
	var opErr *net.OpError // crypto/tls reports an alert it received this way
	return errors.As(err, &opErr) && opErr.Op == "remote error"
}

// tooFewBrokers tells INVALID_REPLICATION_FACTOR for want of brokers (KRaft:
// "... cannot be reached because only 2 broker(s) are registered", "All
// brokers are currently fenced ..."; ZooKeeper: "... larger than available
// brokers: 2") from a replication factor that is invalid in itself ("must be
// larger than 0, or -1 ..."). Only the broker's message says which.
func tooFewBrokers(err error) bool {
	var topicErr *sarama.TopicError
	return errors.As(err, &topicErr) && topicErr.ErrMsg != nil && strings.Contains(*topicErr.ErrMsg, "broker")
}

// ErrNotVisibleYet marks an UNKNOWN_TOPIC_OR_PARTITION answer about a topic
// that is known to exist: one of the group's own topics that this instance
// or another one of the group created a moment ago (the creation was
// answered, or answered TOPIC_ALREADY_EXISTS), which the broker asked has
// not yet applied to its metadata. Instances of a group that start together
// all meet it, for a few milliseconds on one broker and longer on a cluster;
// it is transient like any UNKNOWN_TOPIC_OR_PARTITION.
var ErrNotVisibleYet = errors.New("topic created a moment ago, not in the broker's metadata yet")

// NotVisibleYet returns err marked with ErrNotVisibleYet when it is an
// UNKNOWN_TOPIC_OR_PARTITION; the caller knows the topics it asked about
// exist. Any other err is returned as it is.
func NotVisibleYet(err error) error {
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) && !errors.Is(err, ErrNotVisibleYet) {
		return fmt.Errorf("%w: %w", ErrNotVisibleYet, err)
	}
	return err
}

// settleGrace is how long Retry treats ErrNotVisibleYet as the expected race
// of instances starting together, logging its retries at Info. Past it the
// broker is slow to apply its metadata, which is worth a warning.
const settleGrace = 5 * time.Second

// retryLog is the level and message of a retry after an attempt that failed
// with err, waited after the first attempt began: Info for ErrNotVisibleYet
// within settleGrace, Warn for anything else or for longer.
func retryLog(err error, waited time.Duration) (slog.Level, string) {
	if errors.Is(err, ErrNotVisibleYet) && waited < settleGrace {
		return slog.LevelInfo, "waiting for a topic the group just created to reach the broker's metadata, retrying"
	}
	return slog.LevelWarn, "kafka not ready, retrying"
}

// Retry calls attempt until it returns nil or an error that is not
// Transient, ctx is done, or timeout has passed since the first call. It
// waits between attempts, starting at 250 ms and doubling up to 5 s, and logs
// every retry with step naming what is being done: at Warn, except a topic
// of the group not visible yet (ErrNotVisibleYet) during its first
// settleGrace, which is logged at Info (retryLog). A non-transient
// error is returned at once; the last transient error is returned wrapped
// with how long it was retried.
func Retry(ctx context.Context, log *slog.Logger, step string, timeout time.Duration, attempt func() error) error {
	start := time.Now()
	deadline := start.Add(timeout)
	backoff := firstBackoff
	for n := 1; ; n++ {
		err := attempt()
		if err == nil || !Transient(err) {
			return err
		}
		left := time.Until(deadline)
		h := hint(err)
		if left <= 0 {
			if h != "" {
				return fmt.Errorf("%s: still failing after %v and %d attempts: %w (%s)", step, timeout, n, err, h)
			}
			return fmt.Errorf("%s: still failing after %v and %d attempts: %w", step, timeout, n, err)
		}
		wait := min(backoff, left)
		attrs := []any{"step", step, "attempt", n, "retryIn", wait, "giveUpIn", left.Round(time.Second), "err", err}
		if h != "" {
			attrs = append(attrs, "hint", h)
		}
		level, msg := retryLog(err, time.Since(start))
		log.Log(ctx, level, msg, attrs...)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %w)", step, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// hint explains an error that reads as something it may not be. An EOF
// while connecting is what a broker going down sends, and also what a
// listener that speaks TLS sends a client that does not, and a plaintext
// listener one that does (seen against kafka.sh's SECURE and PLAINTEXT
// listeners): the error alone does not tell them apart.
func hint(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "the broker closed the connection: a broker going down, or a listener that expects TLS " +
			"when the worker has none (--tls), or none when it has it"
	}
	return ""
}

// WithAdmin runs fn with an admin client, retrying with Retry when connecting
// or fn fails transiently. Every attempt connects a new client: a client keeps
// the metadata it bootstrapped with, so a dead broker would stay in its broker
// list (and maybe as its controller) while a new one asks the seeds afresh.
// fn must therefore be safe to repeat (create-if-missing, reads).
func WithAdmin(ctx context.Context, log *slog.Logger, step string, brokers []string, cfg *sarama.Config,
	timeout time.Duration, fn func(sarama.ClusterAdmin) error) error {
	return Retry(ctx, log, step, timeout, func() error {
		admin, err := sarama.NewClusterAdmin(brokers, cfg)
		if err != nil {
			return fmt.Errorf("connect to %v: %w", brokers, err)
		}
		defer admin.Close()
		return fn(admin)
	})
}
