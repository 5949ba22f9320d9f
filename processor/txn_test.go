package processor

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// The abort log names PRODUCER_FENCED, for which sarama has no text, says
// what it means, and leaves other errors as they are; errors.Is still sees
// the code.
func TestDescribeNamesProducerFenced(t *testing.T) {
	for _, tc := range []struct {
		err    error
		want   string
		fenced bool
	}{
		{fmt.Errorf("commit transaction: %w", sarama.ErrProducerFenced),
			`err="commit transaction: kafka server: PRODUCER_FENCED (error code 90) (this producer's epoch is stale;`, true},
		{fmt.Errorf("commit transaction: %w", sarama.ErrIllegalGeneration),
			`err="commit transaction: kafka server: The provided generation id is not the current generation (ILLEGAL_GENERATION)"`, true},
		{errors.New("broker gone"), `err="broker gone"`, false},
	} {
		var buf bytes.Buffer
		log := kafkautil.NamingLogger(slog.New(slog.NewTextHandler(&buf, nil)))
		log.Warn("transaction failed, aborting", "err", describe(tc.err))
		if got := buf.String(); !strings.Contains(got, tc.want) || strings.Contains(got, "how did this happen") {
			t.Errorf("logged %q; want it to contain %q", got, tc.want)
		}
		if !errors.Is(describe(tc.err), tc.err) {
			t.Errorf("describe(%v) lost the error", tc.err)
		}
		if isFencing(tc.err) != tc.fenced {
			t.Errorf("isFencing(%v) = %v, want %v", tc.err, !tc.fenced, tc.fenced)
		}
	}
}
