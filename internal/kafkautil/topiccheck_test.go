package kafkautil

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

// topicsAdmin is a cluster of topics: name -> partition count and
// cleanup.policy. CreateTopic answers TOPIC_ALREADY_EXISTS for a topic it
// has, or createErr for the topics in failCreate.
type topicsAdmin struct {
	sarama.ClusterAdmin // only the methods below are called
	partitions          map[string]int32
	policy              map[string]string
	hidden              map[string]bool // exists, but not in the metadata yet
	failCreate          map[string]error
	configErr           sarama.KError // the table's error code in DescribeConfigs
	created             []string
	createCalls         int
	describes           int
	describedConfigs    int
}

func (a *topicsAdmin) CreateTopic(name string, d *sarama.TopicDetail, _ bool) error {
	a.createCalls++
	if err := a.failCreate[name]; err != nil {
		return err
	}
	if _, ok := a.partitions[name]; ok {
		return sarama.ErrTopicAlreadyExists
	}
	a.created = append(a.created, name)
	a.partitions[name] = d.NumPartitions
	return nil
}

func (a *topicsAdmin) DescribeTopics(topics []string) ([]*sarama.TopicMetadata, error) {
	a.describes++
	var out []*sarama.TopicMetadata
	for _, name := range topics {
		m := &sarama.TopicMetadata{Name: name}
		if n, ok := a.partitions[name]; ok && !a.hidden[name] {
			m.Partitions = make([]*sarama.PartitionMetadata, n)
		} else {
			m.Err = sarama.ErrUnknownTopicOrPartition
		}
		out = append(out, m)
	}
	return out, nil
}

func (a *topicsAdmin) DescribeConfigs(rs []*sarama.ConfigResource, _ sarama.DescribeConfigsOptions) ([]*sarama.ConfigResourceResult, error) {
	a.describedConfigs++
	var out []*sarama.ConfigResourceResult
	for _, r := range rs {
		if a.configErr != sarama.ErrNoError {
			out = append(out, &sarama.ConfigResourceResult{Type: r.Type, Name: r.Name, ErrorCode: a.configErr})
			continue
		}
		policy, ok := a.policy[r.Name]
		if !ok {
			policy = "delete" // the broker's default
		}
		out = append(out, &sarama.ConfigResourceResult{Type: r.Type, Name: r.Name,
			Configs: []sarama.ConfigEntry{{Name: "cleanup.policy", Value: policy}}})
	}
	return out, nil
}

var testGroupTopics = GroupTopics{Inputs: []string{"in"}, Outputs: []string{"out"}, DLQ: "g-dlq", Table: "g-table", Loop: "g-loop",
	Group: "g", Brokers: []string{"k1:9092", "k2:9092"}}

func TestEnsureGroupTopicsChecksExistingTopics(t *testing.T) {
	for _, tc := range []struct {
		name       string
		partitions map[string]int32 // besides the input's 3
		policy     map[string]string
		want       []string // in the error, in order; none: it succeeds
	}{
		{"nothing exists yet", nil, nil, nil},
		{"all exist as needed", map[string]int32{"out": 12, "g-dlq": 1, "g-table": 3, "g-loop": 3},
			map[string]string{"g-table": "compact"}, nil},
		{"table with fewer partitions", map[string]int32{"g-table": 2}, map[string]string{"g-table": "compact"}, []string{
			"existing topic does not fit the group: topic g-table has 2 partitions, want 3 (the input in has 3)",
			"with every worker of group g stopped",
			"`processor reset-state --brokers k1:9092,k2:9092 --group g --state-dir <each instance's --state-dir> --yes`",
			"created again with 3 partitions"}},
		{"table with more partitions", map[string]int32{"g-table": 6}, map[string]string{"g-table": "compact"}, []string{
			"topic g-table has 6 partitions, want 3", "processor reset-state --brokers k1:9092,k2:9092 --group g",
			"`kafka-topics.sh --bootstrap-server k1:9092,k2:9092 --alter --topic in --partitions 6`"}},
		{"table with cleanup.policy=delete", map[string]int32{"g-table": 3}, map[string]string{"g-table": "delete"}, []string{
			"topic g-table has cleanup.policy=delete, want compact",
			"`kafka-configs.sh --bootstrap-server k1:9092,k2:9092 --alter --entity-type topics --entity-name g-table --add-config cleanup.policy=compact`"}},
		{"table with cleanup.policy=compact,delete", map[string]int32{"g-table": 3}, map[string]string{"g-table": "compact,delete"}, []string{
			"topic g-table has cleanup.policy=compact,delete, want compact", "with delete as well",
			"--entity-name g-table --add-config cleanup.policy=compact`"}},
		{"loop with another count", map[string]int32{"g-loop": 4}, nil, []string{
			"topic g-loop has 4 partitions, want 3 (the input in has 3)",
			"with every worker of group g stopped and the group's lag on g-loop 0",
			"`kafka-topics.sh --bootstrap-server k1:9092,k2:9092 --delete --topic g-loop`"}},
		{"output and dead-letter topics of any count", map[string]int32{"out": 1, "g-dlq": 7}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &topicsAdmin{partitions: map[string]int32{"in": 3}, policy: tc.policy}
			for k, v := range tc.partitions {
				a.partitions[k] = v
			}
			parts, err := EnsureGroupTopics(a, testGroupTopics, -1)
			if tc.want == nil {
				if err != nil || parts != 3 {
					t.Fatalf("got %d partitions, err %v; want 3", parts, err)
				}
				for _, topic := range []string{"out", "g-dlq", "g-table", "g-loop"} {
					if _, existed := tc.partitions[topic]; !existed && !slices.Contains(a.created, topic) {
						t.Errorf("%s not created (created %v)", topic, a.created)
					}
				}
				if _, existed := tc.partitions["g-table"]; !existed && a.describedConfigs != 0 {
					t.Errorf("the table it created was described %d times", a.describedConfigs)
				}
				return
			}
			if !errors.Is(err, ErrTopicMismatch) || Transient(err) {
				t.Fatalf("err %v: want ErrTopicMismatch, not transient", err)
			}
			rest := err.Error()
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error does not say %q (in order):\n%v", w, err)
				}
				rest = rest[i+len(w):]
			}
			t.Logf("%v", err)
		})
	}
}

// A worker restarted on a group whose topics all exist waits on as few
// requests as possible before it joins: one DescribeTopics for every topic,
// no CreateTopics, and the table's cleanup.policy.
func TestEnsureGroupTopicsAsksOnceWhenAllExist(t *testing.T) {
	a := &topicsAdmin{partitions: map[string]int32{"in": 3, "out": 12, "g-dlq": 3, "g-table": 3, "g-loop": 3},
		policy: map[string]string{"g-table": "compact"}}
	parts, err := EnsureGroupTopics(a, testGroupTopics, -1)
	if err != nil || parts != 3 {
		t.Fatalf("got %d partitions, err %v; want 3", parts, err)
	}
	if a.describes != 1 || a.createCalls != 0 || a.describedConfigs != 1 {
		t.Fatalf("%d DescribeTopics, %d CreateTopic, %d DescribeConfigs; want 1, 0, 1", a.describes, a.createCalls, a.describedConfigs)
	}
}

func TestEnsureGroupTopicsOtherFailures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		admin     *topicsAdmin
		want      string
		transient bool
		refused   bool
		// notVisible: the expected race of instances starting together,
		// which Retry logs at Info (ErrNotVisibleYet)
		notVisible bool
	}{
		{"dead-letter topic cannot be created", &topicsAdmin{failCreate: map[string]error{"g-dlq": sarama.ErrPolicyViolation}},
			`create topic "g-dlq": `, false, false, false},
		{"table made by another instance, not in the metadata yet", &topicsAdmin{partitions: map[string]int32{"g-table": 3},
			hidden: map[string]bool{"g-table": true}}, `describe topic "g-table": `, true, false, true},
		{"table made by another instance, its config not readable yet", &topicsAdmin{partitions: map[string]int32{"g-table": 3},
			configErr: sarama.ErrUnknownTopicOrPartition}, "describe configs of g-table: ", true, false, true},
		{"no DescribeConfigs on the table", &topicsAdmin{partitions: map[string]int32{"g-table": 3},
			configErr: sarama.ErrTopicAuthorizationFailed},
			"describe configs of g-table (the worker checks its cleanup.policy at start: allow DescribeConfigs on it): ", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.admin.partitions == nil {
				tc.admin.partitions = map[string]int32{}
			}
			tc.admin.partitions["in"] = 3
			_, err := EnsureGroupTopics(tc.admin, testGroupTopics, -1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if Transient(err) != tc.transient || Refused(err) != tc.refused {
				t.Fatalf("err %v: transient %v, refused %v; want %v, %v", err, Transient(err), Refused(err), tc.transient, tc.refused)
			}
			if errors.Is(err, ErrNotVisibleYet) != tc.notVisible {
				t.Fatalf("err %v: ErrNotVisibleYet %v, want %v", err, !tc.notVisible, tc.notVisible)
			}
		})
	}
}

// The inputs of a group share its table and loop topics, so they must have
// one partition count; a mismatch names every input with its count and
// creates nothing.
func TestEnsureGroupTopicsWithSeveralInputs(t *testing.T) {
	two := testGroupTopics
	two.Inputs = []string{"in", "in-retry"}
	for _, tc := range []struct {
		name       string
		partitions map[string]int32
		want       []string // in the error, in order; none: it succeeds with 3
	}{
		{"one count", map[string]int32{"in": 3, "in-retry": 3}, nil},
		{"different counts", map[string]int32{"in": 3, "in-retry": 2}, []string{
			"existing topic does not fit the group: the inputs of group g have different partition counts (in has 3, in-retry has 2)",
			"co-partitioned with every input",
			"`kafka-topics.sh --bootstrap-server k1:9092,k2:9092 --alter --topic in-retry --partitions 3`"}},
		{"table with more partitions than the inputs", map[string]int32{"in": 3, "in-retry": 3, "g-table": 4}, []string{
			"topic g-table has 4 partitions, want 3 (the inputs in, in-retry have 3)",
			"if the inputs are to have 4 partitions, raise them to that: " +
				"`kafka-topics.sh --bootstrap-server k1:9092,k2:9092 --alter --topic in --partitions 4` and " +
				"`kafka-topics.sh --bootstrap-server k1:9092,k2:9092 --alter --topic in-retry --partitions 4`"}},
		{"loop with another count", map[string]int32{"in": 3, "in-retry": 3, "g-loop": 2}, []string{
			"topic g-loop has 2 partitions, want 3 (the inputs in, in-retry have 3)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &topicsAdmin{partitions: tc.partitions, policy: map[string]string{"g-table": "compact"}}
			parts, err := EnsureGroupTopics(a, two, -1)
			if tc.want == nil {
				if err != nil || parts != 3 {
					t.Fatalf("got %d partitions, err %v; want 3", parts, err)
				}
				return
			}
			if !errors.Is(err, ErrTopicMismatch) || Transient(err) {
				t.Fatalf("err %v: want ErrTopicMismatch, not transient", err)
			}
			rest := err.Error()
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error does not say %q (in order):\n%v", w, err)
				}
				rest = rest[i+len(w):]
			}
			if _, ok := tc.partitions["g-table"]; !ok && len(a.created) != 0 {
				t.Errorf("created %v for inputs that do not fit", a.created)
			}
			t.Logf("%v", err)
		})
	}
	t.Run("a missing input is named", func(t *testing.T) {
		a := &topicsAdmin{partitions: map[string]int32{"in": 3}}
		_, _, err := ensureTopics(a, two, -1, 0)
		if !errors.Is(err, ErrNoInputTopic) || !strings.Contains(err.Error(), `"in-retry"`) {
			t.Fatalf("err %v, want ErrNoInputTopic naming in-retry", err)
		}
		if len(a.created) != 0 {
			t.Errorf("created %v without every input", a.created)
		}
	})
}
