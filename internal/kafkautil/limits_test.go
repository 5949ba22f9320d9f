package kafkautil

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/IBM/sarama"
)

// limitsAdmin answers DescribeConfigs with each topic's max.message.bytes,
// or its error code.
type limitsAdmin struct {
	sarama.ClusterAdmin // only DescribeConfigs is called
	max                 map[string]int
	codes               map[string]sarama.KError
	requests            int
}

func (a *limitsAdmin) DescribeConfigs(rs []*sarama.ConfigResource, _ sarama.DescribeConfigsOptions) ([]*sarama.ConfigResourceResult, error) {
	a.requests++
	var out []*sarama.ConfigResourceResult
	for _, r := range rs {
		res := &sarama.ConfigResourceResult{Type: r.Type, Name: r.Name, ErrorCode: a.codes[r.Name]}
		if res.ErrorCode == sarama.ErrNoError {
			res.Configs = []sarama.ConfigEntry{{Name: "max.message.bytes", Value: strconv.Itoa(a.max[r.Name])}}
		}
		out = append(out, res)
	}
	return out, nil
}

func TestMaxMessageBytes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		admin       *limitsAdmin
		wantLimit   int
		wantSkipped []string
		wantErr     sarama.KError
	}{
		{"smallest of all", &limitsAdmin{max: map[string]int{"a": 1 << 20, "b": 2000, "c": 64 << 10}}, 2000, nil, sarama.ErrNoError},
		{"refused topics left out", &limitsAdmin{max: map[string]int{"a": 1 << 20, "c": 64 << 10},
			codes: map[string]sarama.KError{"b": sarama.ErrTopicAuthorizationFailed}}, 64 << 10, []string{"b"}, sarama.ErrNoError},
		{"other errors fail", &limitsAdmin{max: map[string]int{"a": 1 << 20, "c": 64 << 10},
			codes: map[string]sarama.KError{"b": sarama.ErrUnknownTopicOrPartition}}, 0, nil, sarama.ErrUnknownTopicOrPartition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit, skipped, err := MaxMessageBytes(tc.admin, "a", "b", "c")
			if tc.wantErr != sarama.ErrNoError {
				var de *sarama.DescribeConfigError
				if !errors.As(err, &de) || de.Err != tc.wantErr {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || limit != tc.wantLimit || !slices.Equal(skipped, tc.wantSkipped) {
				t.Fatalf("limit %d, skipped %v, err %v; want %d, %v", limit, skipped, err, tc.wantLimit, tc.wantSkipped)
			}
			if tc.admin.requests != 1 {
				t.Errorf("%d DescribeConfigs requests, want one for all topics", tc.admin.requests)
			}
		})
	}
}
