package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/metrics"
	"github.com/dedupkit/dedup/internal/netfault"
	"github.com/dedupkit/dedup/processor"
)

// A worker that cannot commit must say so. It runs here as a user with the
// ACLs docs/security.md lists, which give no DescribeConfigs on the output
// topic: the worker cannot read that topic's max.message.bytes (it warns at
// start). The limit is lowered to 1 KiB after the worker started, so once a
// 4 KiB event comes, every transaction holds a record the broker refuses,
// reading the limits again does not help, and the member consumes the event
// again after each abort: the worker makes no progress while its tables are
// fine and its process is up. /readyz must turn 503 once the aborts reach
// --ready-abort-limit, /healthz once the event has waited
// --live-stall-after, and both must be 200 again once the topic takes the
// record. (With DescribeConfigs the worker dead-letters the event instead:
// TestRecordLimitLoweredWhileRunning.)
func TestHealthOfAWorkerThatCannotCommit(t *testing.T) {
	sec := secureEnv(t)
	e := newEnv(t, 1)
	group := e.group("health")
	if err := kafkatest.CreateTopic(e.brokers, e.output, 1); err != nil {
		t.Fatal(err)
	}
	user, password := scramUser(t, sec, e.brokers, processor.SASLSCRAMSHA256)
	grant(t, e.brokers, user, workerACLs(group, e.input, e.output, true))
	t.Setenv("PROCESSOR_SASL_PASSWORD", password)
	const readyStall, liveStall = 11 * time.Second, 16 * time.Second
	p := startProc(t, buildProcessor(t), workerArgs(e, group, t.TempDir(), "--commit-interval", "50ms",
		"--ready-abort-limit", "3", "--ready-stall-after", readyStall.String(), "--live-stall-after", liveStall.String(),
		"--brokers", strings.Join(sec.brokers, ","), "--tls", "--tls-ca-file", sec.caFile,
		"--sasl-mechanism", "SCRAM-SHA-256", "--sasl-user", user)...)

	small := e.produce(event("small", "a"))
	e.waitProcessed(group)
	h := p.waitHealth("/readyz", http.StatusOK, time.Minute, nil)
	if !h.Live || h.ConsecutiveAborts != 0 || h.SinceCommitSeconds == nil || !h.CommitChecks {
		t.Fatalf("a worker that committed: %+v", h)
	}

	if !strings.Contains(p.logs.String(), "no DescribeConfigs on these topics") {
		t.Errorf("the worker did not warn that it cannot read the output topic's limit:\n%s", tail(p.logs.String(), 20))
	}
	lowerMaxMessageBytes(t, e.brokers, e.output, 1024)
	big := e.produce(kafkatest.Record{Key: "b", Value: bigEvent("big")})
	refused := time.Now()
	h = p.waitHealth("/readyz", http.StatusServiceUnavailable, time.Minute, func(h metrics.Health) bool { return h.ConsecutiveAborts >= 3 })
	t.Logf("/readyz 503 %v after the refused record: %s", time.Since(refused).Round(time.Millisecond), asJSON(h))
	if !strings.Contains(strings.Join(h.Reasons, "; "), "transactions aborted in a row (not ready from 3)") {
		t.Errorf("/readyz reasons %q do not name the aborts", h.Reasons)
	}
	if h.UncommittedSeconds < liveStall.Seconds() && !h.Live {
		t.Errorf("not live after %.1fs of waiting: %+v", h.UncommittedSeconds, h)
	}
	if n := p.metric("dedup_consecutive_aborts"); n < 3 {
		t.Errorf("dedup_consecutive_aborts = %v, want 3 or more", n)
	}

	h = p.waitHealth("/healthz", http.StatusServiceUnavailable, time.Minute, nil)
	t.Logf("/healthz 503 %v after the refused record: %s", time.Since(refused).Round(time.Millisecond), asJSON(h))
	if h.UncommittedSeconds < liveStall.Seconds() || !strings.Contains(strings.Join(h.Reasons, "; "), "not live from 16s") {
		t.Errorf("/healthz 503 with %+v", h)
	}

	setMaxMessageBytes(t, e.brokers, e.output, 1<<20)
	fixed := time.Now()
	p.waitHealth("/readyz", http.StatusOK, time.Minute, nil)
	t.Logf("/readyz 200 %v after the topic took the record", time.Since(fixed).Round(time.Millisecond))
	h = p.waitHealth("/healthz", http.StatusOK, time.Minute, nil)
	if h.ConsecutiveAborts != 0 || h.UncommittedSeconds >= readyStall.Seconds() {
		t.Errorf("after the commit: %+v", h)
	}
	e.waitProcessed(group)
	e.exactlyOnce(append(small, big...))
	if n := p.metric("dedup_consecutive_aborts"); n != 0 {
		t.Errorf("dedup_consecutive_aborts = %v after a commit, want 0", n)
	}
	p.term()
}

// A worker cut off from the broker while it holds consumed records cannot
// commit them, and may not even see an error: its commit waits on held
// connections (a blackhole). Nothing aborts, so only the records' wait can
// tell: /readyz must turn 503 at --ready-stall-after, /healthz at
// --live-stall-after, and both must be 200 again once the worker, back on
// the network, has committed.
func TestHealthOfAWorkerCutOffWithUncommittedRecords(t *testing.T) {
	routes := proxyRoutes(t)
	e := newEnv(t, 1)
	px, err := netfault.Start(routes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	group := e.group("health-cut")
	// A 5 s commit interval, so that the worker is cut off holding records
	// (the cut comes within a poll of the record's processing).
	p := startProc(t, buildProcessor(t), append(workerArgs(e, group, t.TempDir(), "--commit-interval", "5s",
		"--ready-stall-after", "11s", "--live-stall-after", "16s"), "--brokers", px.Addrs())...)
	p.waitHealth("/readyz", http.StatusOK, time.Minute, nil)

	var sent []kafkatest.Record
	for attempt := 0; ; attempt++ {
		processed := p.metric("dedup_events_processed_total")
		sent = append(sent, e.produce(event(fmt.Sprintf("cut-%d", attempt), "a"))...)
		p.waitMetric("dedup_events_processed_total", time.Minute, func(v float64) bool { return v > processed })
		px.Blackhole()
		if _, h, err := p.health("/readyz"); err != nil || h.UncommittedSeconds > 0 {
			break // cut off holding the record
		}
		if attempt == 3 { // each time the commit came first: a 5 s interval, a 0.1 s poll
			t.Fatal("the worker committed each record before it was cut off")
		}
		px.Heal()
	}
	cut := time.Now()
	h := p.waitHealth("/readyz", http.StatusServiceUnavailable, time.Minute, func(h metrics.Health) bool {
		return strings.Contains(strings.Join(h.Reasons, "; "), "not committed (not ready from 11s)")
	})
	t.Logf("/readyz 503 %v after the cut: %s", time.Since(cut).Round(time.Millisecond), asJSON(h))
	h = p.waitHealth("/healthz", http.StatusServiceUnavailable, time.Minute, nil)
	t.Logf("/healthz 503 %v after the cut: %s", time.Since(cut).Round(time.Millisecond), asJSON(h))
	if !strings.Contains(strings.Join(h.Reasons, "; "), "not committed (not live from 16s)") {
		t.Errorf("/healthz reasons %q", h.Reasons)
	}

	px.Heal()
	healed := time.Now()
	p.waitHealth("/readyz", http.StatusOK, 2*time.Minute, nil)
	h = p.waitHealth("/healthz", http.StatusOK, time.Minute, nil)
	t.Logf("/readyz and /healthz 200 %v after healing: %s", time.Since(healed).Round(time.Millisecond), asJSON(h))
	e.waitProcessed(group)
	e.exactlyOnce(sent)
	p.term()
}

func asJSON(h metrics.Health) string {
	b, _ := json.Marshal(h)
	return string(b)
}

// bigEvent is an envelope of about 4 KiB.
func bigEvent(id string) []byte {
	return fmt.Appendf(nil, `{"eventId":%q,"aggregateId":"b","type":"OrderPaid","payload":{"pad":%q}}`, id, strings.Repeat("x", 4096))
}

// setMaxMessageBytes sets max.message.bytes n on the existing topic.
func setMaxMessageBytes(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	setTopicConfig(t, brokers, topic, "max.message.bytes", fmt.Sprint(n))
}

// lowerMaxMessageBytes sets max.message.bytes n on the existing topic, its
// only partition, and returns once the broker refuses a record larger than
// n. The broker applies a config change after the alter has returned: a
// worker that writes a big record before then has it taken, and what the
// test waits for never happens. The probe is written in a transaction that
// is aborted, so no reader (read_committed) ever sees it.
func lowerMaxMessageBytes(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	setMaxMessageBytes(t, brokers, topic, n)
	id := unique("limit-probe")
	deadline := time.Now().Add(30 * time.Second)
	for !limitRefuses(t, brokers, id, topic, n+1) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still takes a record of %d bytes 30 s after max.message.bytes=%d was set", topic, n+1, n)
		}
		time.Sleep(100 * time.Millisecond) // polling the broker's applying of the config
	}
}

// limitRefuses writes a record of size bytes to partition 0 of topic in a
// transaction of transactional ID id, aborts it, and says whether the
// broker refused the record as too large.
func limitRefuses(t *testing.T, brokers []string, id, topic string, size int) bool {
	t.Helper()
	p, err := sarama.NewSyncProducer(brokers, txnProducerConfig(id))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.ByteEncoder(make([]byte, size))})
	if errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		_ = p.AbortTxn() // nothing was written
		return true
	}
	if err != nil {
		t.Fatalf("probe of %s's record limit: %v", topic, err)
	}
	if err := p.AbortTxn(); err != nil {
		t.Fatalf("aborting the probe of %s's record limit: %v", topic, err)
	}
	return false
}

// setTopicConfig sets one config entry of the existing topic (the others
// keep their values: an incremental alter).
func setTopicConfig(t *testing.T, brokers []string, topic, name, value string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	entries := map[string]sarama.IncrementalAlterConfigsEntry{name: {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &value}}
	if err := admin.IncrementalAlterConfig(sarama.TopicResource, topic, entries, false); err != nil {
		t.Fatalf("%s=%s on %s: %v", name, value, topic, err)
	}
}

// waitHealth polls path until it answers status and cond (when not nil)
// holds for its body, and returns the body.
func (p *proc) waitHealth(path string, status int, timeout time.Duration, cond func(metrics.Health) bool) metrics.Health {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, h, err := p.health(path)
		if err == nil && code == status && (cond == nil || cond(h)) {
			return h
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s = %d %+v (%v), want %d within %v\n%s", path, code, h, err, status, timeout, tail(p.logs.String(), 40))
		}
		time.Sleep(100 * time.Millisecond) // polling another process's endpoint
	}
}

func (p *proc) health(path string) (int, metrics.Health, error) {
	var h metrics.Health
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, h, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, h, err
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return resp.StatusCode, h, fmt.Errorf("body %q: %w", b, err)
	}
	return resp.StatusCode, h, nil
}
