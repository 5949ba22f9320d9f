package kafkautil

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

func TestKafkaName(t *testing.T) {
	for _, tc := range []struct {
		code sarama.KError
		want string
	}{
		{sarama.ErrUnknown, "UNKNOWN_SERVER_ERROR"},
		{sarama.ErrUnknownTopicOrPartition, "UNKNOWN_TOPIC_OR_PARTITION"},
		{sarama.ErrNotLeaderForPartition, "NOT_LEADER_OR_FOLLOWER"},
		{sarama.ErrNotCoordinatorForConsumer, "NOT_COORDINATOR"},
		{sarama.ErrConcurrentTransactions, "CONCURRENT_TRANSACTIONS"},
		{sarama.ErrTopicAuthorizationFailed, "TOPIC_AUTHORIZATION_FAILED"},
		{sarama.ErrProducerFenced, "PRODUCER_FENCED"}, // 90: sarama has no text for it
		{91, "RESOURCE_NOT_FOUND"},
		{sarama.ErrInvalidUpdateVersion, "INVALID_UPDATE_VERSION"},
		{105, "TRANSACTIONAL_ID_NOT_FOUND"},
		{120, "TRANSACTION_ABORTABLE"},
		{127, "VOTER_NOT_FOUND"},
		{128, ""}, // newer than Kafka 3.9
	} {
		if got := KafkaName(tc.code); got != tc.want {
			t.Errorf("KafkaName(%d) = %q, want %q", tc.code, got, tc.want)
		}
	}
	// Every code from -1 to the last is named: the table has no holes.
	for c := sarama.KError(-1); c <= 127; c++ {
		if KafkaName(c) == "" {
			t.Errorf("code %d has no name", c)
		}
	}
}

func TestNamedErrorNamesTheCodeAndKeepsErrorsIs(t *testing.T) {
	fenced := fmt.Errorf("commit transaction: %w", sarama.ErrProducerFenced)
	topicErr := fmt.Errorf("create topic %q: %w", "g-dlq",
		&sarama.TopicError{Err: sarama.ErrPolicyViolation, ErrMsg: ptr("topic names must not start with g-")})
	for _, tc := range []struct {
		name   string
		err    error
		want   string
		target error
	}{
		{"a code sarama does not know", fenced,
			"commit transaction: kafka server: PRODUCER_FENCED (error code 90)", sarama.ErrProducerFenced},
		{"a code sarama knows", fmt.Errorf("read orders: %w", sarama.ErrTopicAuthorizationFailed),
			"read orders: kafka server: The client is not authorized to access this topic (TOPIC_AUTHORIZATION_FAILED)",
			sarama.ErrTopicAuthorizationFailed},
		{"in a sarama error type", topicErr, `create topic "g-dlq": kafka server: Request parameters do not satisfy the ` +
			"configured policy (POLICY_VIOLATION) - topic names must not start with g-", sarama.ErrPolicyViolation},
		{"joined", errors.Join(fenced, fmt.Errorf("member 2: %w", sarama.ErrProducerFenced)),
			"commit transaction: kafka server: PRODUCER_FENCED (error code 90)\nmember 2: kafka server: PRODUCER_FENCED (error code 90)",
			sarama.ErrProducerFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			named := Named(tc.err)
			if named.Error() != tc.want {
				t.Fatalf("got  %q\nwant %q", named.Error(), tc.want)
			}
			if !errors.Is(named, tc.target) {
				t.Fatalf("errors.Is(%v, %v) is false", named, tc.target)
			}
			if again := Named(fmt.Errorf("start: %w", named)); again.Error() != "start: "+tc.want {
				t.Fatalf("named twice: %q", again.Error())
			}
		})
	}
	plain := errors.New("no kafka here")
	if Named(plain) != plain || Named(nil) != nil {
		t.Fatal("an error without a Kafka code was changed")
	}
}

func TestNamingLoggerNamesCodesInErrorAttributes(t *testing.T) {
	var buf bytes.Buffer
	log := NamingLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	if NamingLogger(log) != log {
		t.Fatal("NamingLogger wrapped its own logger again")
	}
	log.With("first", fmt.Errorf("init: %w", sarama.KError(90))).WithGroup("g").
		Error("commit failed", "err", fmt.Errorf("commit: %w", sarama.ErrProducerFenced), "n", 3)
	out := buf.String()
	for _, want := range []string{`first="init: kafka server: PRODUCER_FENCED (error code 90)"`,
		`g.err="commit: kafka server: PRODUCER_FENCED (error code 90)"`, "g.n=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("log line lacks %s:\n%s", want, out)
		}
	}
}

// Text that was an error before it became a string — an error formatted
// with %v, a line of goka's printf-style logger — names the codes sarama
// has no text for.
func TestNameText(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"a code sarama does not know", "commit: Unknown error, how did this happen? Error code = 90",
			"commit: kafka server: PRODUCER_FENCED (error code 90)"},
		{"two codes", "a: Unknown error, how did this happen? Error code = 90; b: Unknown error, how did this happen? Error code = 105",
			"a: kafka server: PRODUCER_FENCED (error code 90); b: kafka server: TRANSACTIONAL_ID_NOT_FOUND (error code 105)"},
		{"a code Kafka does not name either", "Unknown error, how did this happen? Error code = 128",
			"Unknown error, how did this happen? Error code = 128"},
		{"a code sarama knows", sarama.ErrInvalidProducerEpoch.Error(), sarama.ErrInvalidProducerEpoch.Error()},
		{"no code", "partitions assigned", "partitions assigned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NameText(tc.text); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// Where the code is no longer in the error's tree (formatted with %v),
// Named still names it from the text.
func TestNamedErrorNamesACodeFormattedAsText(t *testing.T) {
	err := fmt.Errorf("end transaction: %v", sarama.ErrProducerFenced)
	if got, want := Named(err).Error(), "end transaction: kafka server: PRODUCER_FENCED (error code 90)"; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// A message or string attribute that holds an error's text, as goka's
// logger and an error formatted into a message write it, is named too.
func TestNamingLoggerNamesCodesInText(t *testing.T) {
	var buf bytes.Buffer
	log := NamingLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	fenced := sarama.ErrProducerFenced.Error()
	log.Info("processor: commit failed: "+fenced, "component", "goka", "cause", fenced)
	out := buf.String()
	if strings.Contains(out, "how did this happen") {
		t.Fatalf("sarama's text for an unknown code in the log:\n%s", out)
	}
	for _, want := range []string{`msg="processor: commit failed: kafka server: PRODUCER_FENCED (error code 90)"`,
		`cause="kafka server: PRODUCER_FENCED (error code 90)"`, "component=goka"} {
		if !strings.Contains(out, want) {
			t.Errorf("log line lacks %s:\n%s", want, out)
		}
	}
}

func ptr(s string) *string { return &s }
