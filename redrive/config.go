package redrive

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/processor"
)

// Config says which dead letters to move and where. Zero values take the
// defaults: the dead-letter topic <Group>-dlq, each record's source topic as
// the target, every reason, partition, offset and time, no limit.
type Config struct {
	Brokers  []string
	Security processor.Security // TLS and SASL, as processor.Config's

	// Group is the worker's consumer group: it names the default
	// dead-letter and state topics, and the loop and table topics a re-drive
	// must never write to. Dead letters another group wrote (dlq-group) are
	// left alone.
	Group string
	// DLQ is the dead-letter topic to read (default <Group>-dlq).
	DLQ string
	// Target, when set, receives every re-driven record instead of the topic
	// each dead letter names in dlq-source-topic.
	Target string
	// StateTopic is the compacted topic that records which dead letters were
	// re-driven, and the transactional.id of the re-drive's producer
	// (default <Group>-redrive). Runs that share it never move a dead letter
	// twice.
	StateTopic string
	// Replication is the state topic's replication factor when it is
	// created (0: the broker's default).
	Replication int16

	// Filters; a dead letter is moved only when it passes all of them.
	// Reasons are dlq-reason values (empty: all). From and To bound the dead
	// letter's timestamp, the time it was dead-lettered: From <= t < To, a
	// zero bound being open. Partitions are the dead-letter topic's (empty:
	// all); FromOffset <= offset < ToOffset in each, ToOffset 0 being open.
	Reasons              []string
	From, To             time.Time
	Partitions           []int32
	FromOffset, ToOffset int64
	// Limit stops the run after this many re-driven dead letters (0: no
	// limit); the next run goes on with the rest.
	Limit int

	// DryRun reads and reports what would be moved and writes nothing: no
	// record, no state, no topic.
	DryRun bool

	// BatchSize is how many dead letters one transaction moves (default
	// 500); TransactionTimeout is the producer's (default 1m).
	BatchSize          int
	TransactionTimeout time.Duration
	Logger             *slog.Logger // nil: slog.Default()

}

// withDefaults returns c with the defaults filled in.
func (c Config) withDefaults() Config {
	if c.DLQ == "" && c.Group != "" {
		c.DLQ = c.Group + "-dlq"
	}
	if c.StateTopic == "" && c.Group != "" {
		c.StateTopic = c.Group + "-redrive"
	}
	if c.Replication == 0 {
		c.Replication = -1
	}
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports every unusable field, named by its `processor redrive`
// flag, so the command prints the error as it is.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if len(c.Brokers) == 0 {
		bad("brokers", "required, e.g. 127.0.0.1:9092")
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			bad("brokers", "%q has no port, want host:port", b)
		}
	}
	if c.Group == "" {
		bad("group", "required: the worker's consumer group")
	}
	internal := map[string]string{c.Group + "-loop": "the group's loop topic", c.Group + "-table": "the group's table topic"}
	if c.Target != "" {
		switch {
		case c.Target == c.DLQ:
			bad("target", "%q is the dead-letter topic itself: its records would come back as dead letters to re-drive", c.Target)
		case c.Target == c.StateTopic:
			bad("target", "%q is the state topic", c.Target)
		case internal[c.Target] != "":
			bad("target", "%q is %s, which only the worker writes", c.Target, internal[c.Target])
		}
	}
	if c.StateTopic == c.DLQ || internal[c.StateTopic] != "" {
		bad("state-topic", "%q is the dead-letter, loop or table topic", c.StateTopic)
	}
	if kafkautil.MemberTxnID(c.Group, c.StateTopic) {
		// The group's leader aborts the open transactions of IDs of this
		// shape whose member left the group (processor/fence.go): it would
		// abort a running re-drive's.
		bad("state-topic", "%q has the shape of the group's workers' transactional IDs (%s-<instance>-<number>), "+
			"which the group's leader fences when no such member is in the group; end it with a letter", c.StateTopic, c.Group)
	}
	if slices.Contains(c.Reasons, "") {
		bad("reason", "empty reason; name dlq-reason values such as handler-error")
	}
	if !c.From.IsZero() && !c.To.IsZero() && !c.To.After(c.From) {
		bad("to", "%s is not after --from %s", c.To.Format(time.RFC3339), c.From.Format(time.RFC3339))
	}
	for _, p := range c.Partitions {
		if p < 0 {
			bad("partition", "%d is negative", p)
		}
	}
	if c.FromOffset < 0 {
		bad("from-offset", "%d is negative", c.FromOffset)
	}
	if c.ToOffset < 0 {
		bad("to-offset", "%d is negative", c.ToOffset)
	}
	if c.ToOffset > 0 && c.ToOffset <= c.FromOffset {
		bad("to-offset", "%d is not after --from-offset %d (the range is from <= offset < to)", c.ToOffset, c.FromOffset)
	}
	if c.Limit < 0 {
		bad("limit", "%d is negative", c.Limit)
	}
	if c.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("batch size %d is negative", c.BatchSize))
	}
	if c.TransactionTimeout < time.Second {
		errs = append(errs, fmt.Errorf("transaction timeout %v: at least 1s", c.TransactionTimeout))
	}
	if err := c.Security.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
