package kafkautil

import (
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// metadataAdmin answers DescribeTopics from a script: the topic is unknown
// for the first unknownFor calls (a broker that has not caught up with a
// new topic's metadata), then known with 6 partitions, or fails with err.
type metadataAdmin struct {
	sarama.ClusterAdmin // only the methods below are called
	unknownFor          int
	err                 sarama.KError
	describes           int
	created             []string
}

func (a *metadataAdmin) DescribeTopics(topics []string) ([]*sarama.TopicMetadata, error) {
	a.describes++
	m := &sarama.TopicMetadata{Name: topics[0], Err: a.err}
	switch {
	case a.describes <= a.unknownFor:
		m.Err = sarama.ErrUnknownTopicOrPartition
	case a.err == sarama.ErrNoError:
		m.Partitions = make([]*sarama.PartitionMetadata, 6)
	}
	return []*sarama.TopicMetadata{m}, nil
}

func (a *metadataAdmin) CreateTopic(name string, _ *sarama.TopicDetail, _ bool) error {
	a.created = append(a.created, name)
	return nil
}

func TestEnsureTopicsWaitsForANewInputTopicsMetadata(t *testing.T) {
	const grace = 2 * time.Second
	for _, tc := range []struct {
		name          string
		admin         *metadataAdmin
		wantErr       error // nil: found with 6 partitions
		wantDescribes func(int) bool
	}{
		{"known at once", &metadataAdmin{}, nil, func(n int) bool { return n == 1 }},
		{"known on the third ask", &metadataAdmin{unknownFor: 2}, nil, func(n int) bool { return n == 3 }},
		{"never known", &metadataAdmin{unknownFor: 1 << 30}, ErrNoInputTopic, func(n int) bool { return n > 2 }},
		{"not authorized fails at once", &metadataAdmin{err: sarama.ErrTopicAuthorizationFailed}, sarama.ErrTopicAuthorizationFailed,
			func(n int) bool { return n == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts, _, err := ensureTopics(tc.admin, GroupTopics{Inputs: []string{"in"}, Outputs: []string{"out"}, DLQ: "dlq"}, -1, grace)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				if len(tc.admin.created) != 0 {
					t.Errorf("created %v without an input topic", tc.admin.created)
				}
			} else {
				if err != nil || parts != 6 {
					t.Fatalf("got %d partitions, err %v; want 6", parts, err)
				}
				if len(tc.admin.created) != 2 {
					t.Errorf("created %v, want out and dlq", tc.admin.created)
				}
			}
			if !tc.wantDescribes(tc.admin.describes) {
				t.Errorf("%d describes", tc.admin.describes)
			}
		})
	}
}
