package kafkautil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
)

// kafkaErrorNames are Kafka's names of its protocol error codes, as
// org.apache.kafka.common.protocol.Errors declares them (kafka-clients
// 3.9.2, every code). sarama prints a code newer than it knows as "Unknown
// error, how did this happen? Error code = 90", and a known one by a
// sentence of its own; operators, Kafka's documentation and the broker's
// logs name them PRODUCER_FENCED, NOT_COORDINATOR and so on.
var kafkaErrorNames = map[sarama.KError]string{
	-1:  "UNKNOWN_SERVER_ERROR",
	0:   "NONE",
	1:   "OFFSET_OUT_OF_RANGE",
	2:   "CORRUPT_MESSAGE",
	3:   "UNKNOWN_TOPIC_OR_PARTITION",
	4:   "INVALID_FETCH_SIZE",
	5:   "LEADER_NOT_AVAILABLE",
	6:   "NOT_LEADER_OR_FOLLOWER",
	7:   "REQUEST_TIMED_OUT",
	8:   "BROKER_NOT_AVAILABLE",
	9:   "REPLICA_NOT_AVAILABLE",
	10:  "MESSAGE_TOO_LARGE",
	11:  "STALE_CONTROLLER_EPOCH",
	12:  "OFFSET_METADATA_TOO_LARGE",
	13:  "NETWORK_EXCEPTION",
	14:  "COORDINATOR_LOAD_IN_PROGRESS",
	15:  "COORDINATOR_NOT_AVAILABLE",
	16:  "NOT_COORDINATOR",
	17:  "INVALID_TOPIC_EXCEPTION",
	18:  "RECORD_LIST_TOO_LARGE",
	19:  "NOT_ENOUGH_REPLICAS",
	20:  "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
	21:  "INVALID_REQUIRED_ACKS",
	22:  "ILLEGAL_GENERATION",
	23:  "INCONSISTENT_GROUP_PROTOCOL",
	24:  "INVALID_GROUP_ID",
	25:  "UNKNOWN_MEMBER_ID",
	26:  "INVALID_SESSION_TIMEOUT",
	27:  "REBALANCE_IN_PROGRESS",
	28:  "INVALID_COMMIT_OFFSET_SIZE",
	29:  "TOPIC_AUTHORIZATION_FAILED",
	30:  "GROUP_AUTHORIZATION_FAILED",
	31:  "CLUSTER_AUTHORIZATION_FAILED",
	32:  "INVALID_TIMESTAMP",
	33:  "UNSUPPORTED_SASL_MECHANISM",
	34:  "ILLEGAL_SASL_STATE",
	35:  "UNSUPPORTED_VERSION",
	36:  "TOPIC_ALREADY_EXISTS",
	37:  "INVALID_PARTITIONS",
	38:  "INVALID_REPLICATION_FACTOR",
	39:  "INVALID_REPLICA_ASSIGNMENT",
	40:  "INVALID_CONFIG",
	41:  "NOT_CONTROLLER",
	42:  "INVALID_REQUEST",
	43:  "UNSUPPORTED_FOR_MESSAGE_FORMAT",
	44:  "POLICY_VIOLATION",
	45:  "OUT_OF_ORDER_SEQUENCE_NUMBER",
	46:  "DUPLICATE_SEQUENCE_NUMBER",
	47:  "INVALID_PRODUCER_EPOCH",
	48:  "INVALID_TXN_STATE",
	49:  "INVALID_PRODUCER_ID_MAPPING",
	50:  "INVALID_TRANSACTION_TIMEOUT",
	51:  "CONCURRENT_TRANSACTIONS",
	52:  "TRANSACTION_COORDINATOR_FENCED",
	53:  "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
	54:  "SECURITY_DISABLED",
	55:  "OPERATION_NOT_ATTEMPTED",
	56:  "KAFKA_STORAGE_ERROR",
	57:  "LOG_DIR_NOT_FOUND",
	58:  "SASL_AUTHENTICATION_FAILED",
	59:  "UNKNOWN_PRODUCER_ID",
	60:  "REASSIGNMENT_IN_PROGRESS",
	61:  "DELEGATION_TOKEN_AUTH_DISABLED",
	62:  "DELEGATION_TOKEN_NOT_FOUND",
	63:  "DELEGATION_TOKEN_OWNER_MISMATCH",
	64:  "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
	65:  "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
	66:  "DELEGATION_TOKEN_EXPIRED",
	67:  "INVALID_PRINCIPAL_TYPE",
	68:  "NON_EMPTY_GROUP",
	69:  "GROUP_ID_NOT_FOUND",
	70:  "FETCH_SESSION_ID_NOT_FOUND",
	71:  "INVALID_FETCH_SESSION_EPOCH",
	72:  "LISTENER_NOT_FOUND",
	73:  "TOPIC_DELETION_DISABLED",
	74:  "FENCED_LEADER_EPOCH",
	75:  "UNKNOWN_LEADER_EPOCH",
	76:  "UNSUPPORTED_COMPRESSION_TYPE",
	77:  "STALE_BROKER_EPOCH",
	78:  "OFFSET_NOT_AVAILABLE",
	79:  "MEMBER_ID_REQUIRED",
	80:  "PREFERRED_LEADER_NOT_AVAILABLE",
	81:  "GROUP_MAX_SIZE_REACHED",
	82:  "FENCED_INSTANCE_ID",
	83:  "ELIGIBLE_LEADERS_NOT_AVAILABLE",
	84:  "ELECTION_NOT_NEEDED",
	85:  "NO_REASSIGNMENT_IN_PROGRESS",
	86:  "GROUP_SUBSCRIBED_TO_TOPIC",
	87:  "INVALID_RECORD",
	88:  "UNSTABLE_OFFSET_COMMIT",
	89:  "THROTTLING_QUOTA_EXCEEDED",
	90:  "PRODUCER_FENCED",
	91:  "RESOURCE_NOT_FOUND",
	92:  "DUPLICATE_RESOURCE",
	93:  "UNACCEPTABLE_CREDENTIAL",
	94:  "INCONSISTENT_VOTER_SET",
	95:  "INVALID_UPDATE_VERSION",
	96:  "FEATURE_UPDATE_FAILED",
	97:  "PRINCIPAL_DESERIALIZATION_FAILURE",
	98:  "SNAPSHOT_NOT_FOUND",
	99:  "POSITION_OUT_OF_RANGE",
	100: "UNKNOWN_TOPIC_ID",
	101: "DUPLICATE_BROKER_REGISTRATION",
	102: "BROKER_ID_NOT_REGISTERED",
	103: "INCONSISTENT_TOPIC_ID",
	104: "INCONSISTENT_CLUSTER_ID",
	105: "TRANSACTIONAL_ID_NOT_FOUND",
	106: "FETCH_SESSION_TOPIC_ID_ERROR",
	107: "INELIGIBLE_REPLICA",
	108: "NEW_LEADER_ELECTED",
	109: "OFFSET_MOVED_TO_TIERED_STORAGE",
	110: "FENCED_MEMBER_EPOCH",
	111: "UNRELEASED_INSTANCE_ID",
	112: "UNSUPPORTED_ASSIGNOR",
	113: "STALE_MEMBER_EPOCH",
	114: "MISMATCHED_ENDPOINT_TYPE",
	115: "UNSUPPORTED_ENDPOINT_TYPE",
	116: "UNKNOWN_CONTROLLER_ID",
	117: "UNKNOWN_SUBSCRIPTION_ID",
	118: "TELEMETRY_TOO_LARGE",
	119: "INVALID_REGISTRATION",
	120: "TRANSACTION_ABORTABLE",
	121: "INVALID_RECORD_STATE",
	122: "SHARE_SESSION_NOT_FOUND",
	123: "INVALID_SHARE_SESSION_EPOCH",
	124: "FENCED_STATE_EPOCH",
	125: "INVALID_VOTER_KEY",
	126: "DUPLICATE_VOTER",
	127: "VOTER_NOT_FOUND",
}

// KafkaName is Kafka's name of code, e.g. PRODUCER_FENCED for 90; "" for a
// code Kafka 3.9 does not define.
func KafkaName(code sarama.KError) string { return kafkaErrorNames[code] }

// namedError is an error whose message names the Kafka error codes in it.
type namedError struct {
	err error
	msg string
}

func (e *namedError) Error() string { return e.msg }
func (e *namedError) Unwrap() error { return e.err }

// Named returns err with a message that names each Kafka error code in it
// by its Kafka name: sarama's sentence gets the name added, "kafka server:
// The client is not authorized to access this topic (TOPIC_AUTHORIZATION_FAILED)",
// and sarama's text for a code it does not know is replaced,
// "kafka server: PRODUCER_FENCED (error code 90)". errors.Is and errors.As
// see err unchanged. An err without a sarama.KError, or one Named already,
// is returned as it is.
func Named(err error) error {
	if err == nil {
		return nil
	}
	var done *namedError
	if errors.As(err, &done) {
		return err
	}
	msg := err.Error()
	named := msg
	for _, code := range kafkaCodes(err, nil) {
		named = strings.ReplaceAll(named, code.Error(), describeCode(code))
	}
	named = NameText(named)
	if named == msg {
		return err
	}
	return &namedError{err: err, msg: named}
}

// unknownCodeText matches sarama's text for a code it has no text of its
// own for (sarama.KError.Error).
var unknownCodeText = regexp.MustCompile(`Unknown error, how did this happen\? Error code = (-?[0-9]+)`)

// NameText replaces, in text, sarama's "Unknown error, how did this happen?
// Error code = 90" with "kafka server: PRODUCER_FENCED (error code 90)" for
// every code Kafka names. It is for text that was an error before it became
// a string (an error formatted with %v, a library's printf-style log line),
// where Named can no longer find the code; a code Kafka does not name is
// left as it is.
func NameText(text string) string {
	if !strings.Contains(text, "Unknown error, how did this happen?") {
		return text
	}
	return unknownCodeText.ReplaceAllStringFunc(text, func(m string) string {
		code, err := strconv.ParseInt(unknownCodeText.FindStringSubmatch(m)[1], 10, 16)
		if err != nil || KafkaName(sarama.KError(code)) == "" {
			return m
		}
		return describeCode(sarama.KError(code))
	})
}

// describeCode is sarama's text of code with Kafka's name.
func describeCode(code sarama.KError) string {
	name := KafkaName(code)
	switch {
	case name == "":
		return code.Error()
	case strings.HasPrefix(code.Error(), "Unknown error, how did this happen?"):
		return fmt.Sprintf("kafka server: %s (error code %d)", name, int16(code))
	}
	return fmt.Sprintf("%s (%s)", code.Error(), name)
}

// kafkaCodes appends the distinct sarama.KErrors in err's tree to codes.
func kafkaCodes(err error, codes []sarama.KError) []sarama.KError {
	if err == nil {
		return codes
	}
	if k, ok := err.(sarama.KError); ok {
		for _, c := range codes {
			if c == k {
				return codes
			}
		}
		return append(codes, k)
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return kafkaCodes(u.Unwrap(), codes)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			codes = kafkaCodes(e, codes)
		}
	}
	return codes
}

// NamingLogger returns a logger that writes through l's handler with every
// error attribute passed through Named, and the message and every string
// attribute through NameText, so the worker's logs name Kafka's error codes
// as its returned errors do, also where an error reached the log as text (a
// library's printf-style logger, an error formatted into a message). A
// logger it made is returned as it is.
func NamingLogger(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(namingHandler); ok {
		return l
	}
	return slog.New(namingHandler{l.Handler()})
}

// namingHandler is a slog.Handler that names the Kafka error codes in error
// attributes (Named) before its inner handler sees them.
type namingHandler struct{ inner slog.Handler }

func (h namingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h namingHandler) Handle(ctx context.Context, r slog.Record) error {
	named := slog.NewRecord(r.Time, r.Level, NameText(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		named.AddAttrs(nameAttr(a))
		return true
	})
	return h.inner.Handle(ctx, named)
}

func (h namingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = nameAttr(a)
	}
	return namingHandler{h.inner.WithAttrs(out)}
}

func (h namingHandler) WithGroup(name string) slog.Handler {
	return namingHandler{h.inner.WithGroup(name)}
}

// nameAttr is a with an error value Named and a string value NameText'd,
// in groups too.
func nameAttr(a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); NameText(s) != s {
			return slog.String(a.Key, NameText(s))
		}
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			return slog.Any(a.Key, Named(err))
		}
	case slog.KindGroup:
		group := a.Value.Group()
		out := make([]slog.Attr, len(group))
		for i, g := range group {
			out[i] = nameAttr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	}
	return a
}
