package processor

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

// The abort log names PRODUCER_FENCED, for which sarama has no text, and
// leaves other errors as they are.
func TestDescribeNamesProducerFenced(t *testing.T) {
	for _, tc := range []struct {
		err    error
		want   string
		fenced bool
	}{
		{fmt.Errorf("commit transaction: %w", sarama.ErrProducerFenced), "PRODUCER_FENCED", true},
		{fmt.Errorf("commit transaction: %w", sarama.ErrIllegalGeneration), sarama.ErrIllegalGeneration.Error(), true},
		{errors.New("broker gone"), "broker gone", false},
	} {
		got := describe(tc.err)
		if !strings.Contains(got, tc.want) || !strings.HasPrefix(got, tc.err.Error()) {
			t.Errorf("describe(%v) = %q; want it to start with the error and contain %q", tc.err, got, tc.want)
		}
		if isFencing(tc.err) != tc.fenced {
			t.Errorf("isFencing(%v) = %v, want %v", tc.err, !tc.fenced, tc.fenced)
		}
	}
}
