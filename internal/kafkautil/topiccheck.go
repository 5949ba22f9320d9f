package kafkautil

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/IBM/sarama"
)

// ErrTopicMismatch is returned when a topic of the group already exists but
// not as the worker needs it: inputs of different partition counts, a table
// or loop topic whose partition count is not the inputs', a table whose
// cleanup.policy is not compact. No retry
// fixes it (Transient is false), so the worker stops at start with the fix;
// left running, it would judge events against the wrong partition's seen
// IDs, or restore a table that the broker's retention has thinned.
var ErrTopicMismatch = errors.New("existing topic does not fit the group")

// tableCleanupPolicy is the only cleanup.policy the table topic may have.
// With "delete", or "compact,delete", the broker drops changelog records
// older than the topic's retention.ms whatever their key: a restored table
// then lacks seen IDs the worker still counts as seen (--retention is
// independent of the topic's retention.ms), and their duplicates pass.
const tableCleanupPolicy = "compact"

// checkCopartitioned fails with ErrTopicMismatch unless topic, which
// exists, has the inputs' partition count. A topic the metadata does not
// show yet (created a moment ago by another instance) is ErrNotVisibleYet,
// a transient UNKNOWN_TOPIC_OR_PARTITION.
func checkCopartitioned(admin sarama.ClusterAdmin, t GroupTopics, topic string, want int32) error {
	meta, err := admin.DescribeTopics([]string{topic})
	if err != nil {
		return NotVisibleYet(fmt.Errorf("describe topic %q: %w", topic, err))
	}
	if len(meta) != 1 {
		return NotVisibleYet(fmt.Errorf("describe topic %q: %w", topic, sarama.ErrUnknownTopicOrPartition))
	}
	if meta[0].Err != sarama.ErrNoError {
		return NotVisibleYet(fmt.Errorf("describe topic %q: %w", topic, meta[0].Err))
	}
	return copartitioned(t, topic, int32(len(meta[0].Partitions)), want)
}

// copartitioned fails with ErrTopicMismatch unless found, the partition
// count of topic, is the inputs' (want).
func copartitioned(t GroupTopics, topic string, found, want int32) error {
	if found == want {
		return nil
	}
	if topic == t.Loop {
		return fmt.Errorf("%w: topic %s has %d partitions, want %d (%s): a re-keyed event is written to "+
			"the loop partition of its table partition. Fix: with every worker of group %s stopped and the group's lag "+
			"on %s 0 (kafka-consumer-groups.sh --bootstrap-server %s --describe --group %s), delete it with "+
			"`kafka-topics.sh --bootstrap-server %s --delete --topic %s`; the worker creates it again with %d partitions",
			ErrTopicMismatch, topic, found, want, t.inputsHave(want), t.group(), topic, t.bootstrap(), t.group(), t.bootstrap(), topic, want)
	}
	fix := fmt.Sprintf("with every worker of group %s stopped, delete the table topic and the local tables with "+
		"`processor reset-state --brokers %s --group %s --state-dir <each instance's --state-dir> --yes` "+
		"(events seen before can then pass again) and start the workers; the table is created again with %d partitions",
		t.group(), t.bootstrap(), t.group(), want)
	if found > want {
		which, it := "the input is", "it"
		if len(t.Inputs) > 1 {
			which, it = "the inputs are", "them"
		}
		fix += fmt.Sprintf("; or, if %s to have %d partitions, raise %s to that: %s", which, found, it, t.alterInputs(t.Inputs, found))
	}
	return fmt.Errorf("%w: topic %s has %d partitions, want %d (%s): table partition p is read "+
		"with input partition p (copartitioning), and the seen IDs in it were placed for %d partitions: changing the "+
		"table's count does not move them. Fix: %s", ErrTopicMismatch, topic, found, want, t.inputsHave(want), found, fix)
}

// checkInputsCopartitioned fails with ErrTopicMismatch unless every input
// has the same partition count (counts, in the order of t.Inputs). The
// group has one table and one loop topic for all its inputs, each partition
// p of which is read with partition p of every input, so one count must fit
// them all.
func checkInputsCopartitioned(t GroupTopics, counts []int32) error {
	largest := slices.Max(counts)
	if slices.Min(counts) == largest {
		return nil
	}
	var each, smaller []string
	for i, in := range t.Inputs {
		each = append(each, fmt.Sprintf("%s has %d", in, counts[i]))
		if counts[i] < largest {
			smaller = append(smaller, in)
		}
	}
	return fmt.Errorf("%w: the inputs of group %s have different partition counts (%s): the group's table and loop "+
		"topics are co-partitioned with every input, partition p of each input read with table partition p, "+
		"so all inputs need one count. Fix: raise the smaller ones to %d: %s (a key's new records may then go to "+
		"another partition than its old ones; a table made for another count is refused at the next start, with its fix), or read the "+
		"inputs with one group each (an event on two of them is then processed by each)",
		ErrTopicMismatch, t.group(), strings.Join(each, ", "), largest, t.alterInputs(smaller, largest))
}

// inputsHave says the inputs' partition count, for the errors.
func (t GroupTopics) inputsHave(n int32) string {
	if len(t.Inputs) == 1 {
		return fmt.Sprintf("the input %s has %d", t.Inputs[0], n)
	}
	return fmt.Sprintf("the inputs %s have %d", strings.Join(t.Inputs, ", "), n)
}

// alterInputs is the command, one per topic, that raises inputs to n
// partitions.
func (t GroupTopics) alterInputs(inputs []string, n int32) string {
	cmds := make([]string, len(inputs))
	for i, in := range inputs {
		cmds[i] = fmt.Sprintf("`kafka-topics.sh --bootstrap-server %s --alter --topic %s --partitions %d`", t.bootstrap(), in, n)
	}
	return strings.Join(cmds, " and ")
}

// checkTablePolicy fails with ErrTopicMismatch unless the table topic's
// cleanup.policy is compact. Reading it needs DescribeConfigs on the topic;
// a refusal names that ACL. The table exists, so UNKNOWN_TOPIC_OR_PARTITION
// is ErrNotVisibleYet.
func checkTablePolicy(admin sarama.ClusterAdmin, t GroupTopics) error {
	entries, err := TopicConfig(admin, t.Table, "cleanup.policy")
	if err != nil {
		if Refused(err) {
			return fmt.Errorf("describe configs of %s (the worker checks its cleanup.policy at start: "+
				"allow DescribeConfigs on it): %w", t.Table, err)
		}
		return NotVisibleYet(fmt.Errorf("describe configs of %s: %w", t.Table, err))
	}
	for _, e := range entries {
		if e.Name != "cleanup.policy" {
			continue
		}
		policy := strings.ReplaceAll(e.Value, " ", "")
		if policy == tableCleanupPolicy {
			return nil
		}
		why := "delete drops seen IDs older than the topic's retention.ms, and a restored table forgets them"
		if strings.Contains(policy, tableCleanupPolicy) {
			why = "with delete as well, the broker drops seen IDs older than the topic's retention.ms, and a restored " +
				"table forgets them while the worker still counts them as seen"
		}
		return fmt.Errorf("%w: topic %s has cleanup.policy=%s, want %s (the table's changelog: %s). Fix: "+
			"`kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config cleanup.policy=%s`",
			ErrTopicMismatch, t.Table, e.Value, tableCleanupPolicy, why, t.bootstrap(), t.Table, tableCleanupPolicy)
	}
	return fmt.Errorf("topic %s reports no cleanup.policy", t.Table)
}

// bootstrap is the brokers as the fix commands take them.
func (t GroupTopics) bootstrap() string {
	if len(t.Brokers) == 0 {
		return "<brokers>"
	}
	return strings.Join(t.Brokers, ",")
}

// group is the consumer group, named by the table topic.
func (t GroupTopics) group() string {
	if t.Group != "" {
		return t.Group
	}
	return strings.TrimSuffix(t.Table, "-table")
}
