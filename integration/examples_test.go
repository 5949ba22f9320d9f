package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/verify"
	"github.com/dedupkit/dedup/internal/wire"
)

// The example programs (examples/) on the real broker, as a user runs them:
// the built binary, SIGKILLed twice while it writes, restarted on the same
// --state-dir and --instance-id, and then every output topic must hold
// exactly one record per event that should produce one.

// buildExample compiles examples/<name>.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", bin, "../examples/"+name).CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/%s: %v\n%s", name, err, out)
	}
	return bin
}

// exampleProc is an example binary running as a child process.
type exampleProc struct {
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan error
}

func startExample(t *testing.T, bin string, args ...string) *exampleProc {
	t.Helper()
	return startExampleEnv(t, bin, nil, args...)
}

// startExampleEnv is startExample with env added to the environment.
func startExampleEnv(t *testing.T, bin string, env []string, args ...string) *exampleProc {
	t.Helper()
	p := &exampleProc{cmd: exec.Command(bin, args...), logs: &syncBuffer{}, exited: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(p.kill)
	return p
}

// kill sends SIGKILL (a no-op once the process is gone) and reaps it.
func (p *exampleProc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Kill()
	<-p.exited
	p.exited <- nil
}

// term sends SIGTERM and requires a clean exit within a minute.
func (p *exampleProc) term(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, tail(p.logs.String(), 40))
		}
	case <-time.After(time.Minute):
		t.Fatalf("no exit within a minute of SIGTERM\n%s", tail(p.logs.String(), 40))
	}
}

// produceBatch writes recs to topic in one batch per call (keyed records go
// to their key's hash partition): thousands of records in a second, so a
// worker finds a backlog it needs several transactions for.
func produceBatch(t *testing.T, brokers []string, topic string, recs []kafkatest.Record) {
	t.Helper()
	p, err := sarama.NewSyncProducer(brokers, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, len(recs))
	for i, r := range recs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(r.Key), Value: sarama.ByteEncoder(r.Value)}
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("produce %d records to %s: %v", len(recs), topic, err)
	}
}

// exampleKills is one run of an example binary through two SIGKILLs.
type exampleKills struct {
	bin     string
	brokers []string
	args    []string // the example's flags, without --state-dir and --instance-id
	group   string
	input   string
	// phases are produced one before each start: the backlog that each
	// start finds unprocessed, so the kill lands while the worker writes.
	phases [][]kafkatest.Record
	// progress is an output topic whose committed records are logged at
	// each kill.
	progress string
}

// run starts the binary once per phase with the same state dir and
// instance id. All but the last start are SIGKILLed once the group has
// committed some but not all of the phase's input: with one instance every
// event is judged in the partition that reads it, so its outputs are
// committed in the transaction that commits its input offset, and some of
// the phase's outputs are committed and some not. After the last start it
// waits until the group has committed its input and its loop topic, then
// stops the worker with SIGTERM.
func (s exampleKills) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	args := append(s.args, "--brokers", strings.Join(s.brokers, ","),
		"--state-dir", t.TempDir(), "--instance-id", "example-0")
	for i, phase := range s.phases {
		produceBatch(t, s.brokers, s.input, phase)
		ends, err := kafkatest.EndOffsets(s.brokers, s.input)
		if err != nil {
			t.Fatal(err)
		}
		before := s.committed(t, ends)
		p := startExample(t, s.bin, args...)
		if i < len(s.phases)-1 {
			at := s.awaitPartlyCommitted(t, ctx, p, before, ends)
			p.kill()
			out, err := kafkatest.ReadAll(ctx, s.brokers, s.progress)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("start %d: SIGKILLed with the input committed to %v of %v (from %v); %d records on %s after the kill",
				i+1, at, ends, before, len(out), s.progress)
			continue
		}
		for _, topic := range []string{s.input, s.group + "-loop"} {
			if err := kafkatest.WaitCommitted(ctx, s.brokers, s.group, topic); err != nil {
				t.Fatalf("%v\n%s", err, tail(p.logs.String(), 40))
			}
		}
		p.term(t)
	}
}

// awaitPartlyCommitted waits until the group has committed an input offset
// past before and not yet all of ends, and returns the offsets it saw. A
// worker that got through the whole phase first fails the test: the kill
// would have tested nothing.
func (s exampleKills) awaitPartlyCommitted(t *testing.T, ctx context.Context, p *exampleProc, before, ends map[int32]int64) map[int32]int64 {
	t.Helper()
	for {
		offs := s.committed(t, ends)
		moved, done := false, true
		for part, end := range ends {
			moved = moved || offs[part] > before[part]
			done = done && offs[part] >= end
		}
		switch {
		case done:
			t.Fatalf("the worker committed the whole phase (%v) before it could be killed: make the phases larger", ends)
		case moved:
			return offs
		}
		select {
		case err := <-p.exited:
			t.Fatalf("the example exited: %v\n%s", err, tail(p.logs.String(), 40))
		case <-ctx.Done():
			t.Fatalf("the group committed no input past %v: %v\n%s", before, ctx.Err(), tail(p.logs.String(), 40))
		case <-time.After(20 * time.Millisecond): // polling another process's progress
		}
	}
}

// committed is the group's committed input offset of each partition in
// ends (-1: none yet).
func (s exampleKills) committed(t *testing.T, ends map[int32]int64) map[int32]int64 {
	t.Helper()
	parts := make([]int32, 0, len(ends))
	for part := range ends {
		parts = append(parts, part)
	}
	offs, err := kafkatest.Committed(s.brokers, s.group, s.input, parts)
	if err != nil {
		t.Fatal(err)
	}
	return offs
}

// countBy counts records by id(r); an error from id fails the test.
func countBy(t *testing.T, topic string, recs []kafkatest.Record, id func(kafkatest.Record) (string, error)) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, r := range recs {
		k, err := id(r)
		if err != nil {
			t.Fatalf("%s p%d@%d: %v (%s)", topic, r.Partition, r.Offset, err, r.Value)
		}
		n[k]++
	}
	return n
}

// exactlyOnce fails unless got holds each of want once and nothing else.
func exactlyOnce(t *testing.T, topic string, got map[string]int, want []string) {
	t.Helper()
	wanted := map[string]bool{}
	for _, id := range want {
		wanted[id] = true
		if got[id] != 1 {
			t.Errorf("%s: event %s written %d times, want once", topic, id, got[id])
		}
	}
	for id, n := range got {
		if !wanted[id] {
			t.Errorf("%s: event %s written %d times, want none", topic, id, n)
		}
	}
	if len(want) == 0 {
		t.Errorf("%s: the test expects no records; it checks nothing", topic)
	}
}

// settlementPhases is the settlement example's input in three phases of n
// events each: OrderPaid events keyed by order ID, every tenth an
// OrderShipped (no output); every fifth re-sent at once, every seventh
// re-published at the end of the next phase under another key (so mostly
// in another partition, after the worker that saw the first copy was killed);
// and in the first phase two events the service rejects. It returns the
// IDs that must be settled.
func settlementPhases(prefix string, n int) (phases [][]kafkatest.Record, paid []string) {
	var later []kafkatest.Record
	for p := range 3 {
		recs := later
		later = nil
		for i := p * n; i < (p+1)*n; i++ {
			id, order := fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("order-%d", i%101)
			typ, payload := "OrderPaid", fmt.Sprintf(`{"orderId":%q,"paymentId":"pay-%d","amount":%d.50}`, order, i, i%500)
			if i%10 == 9 {
				typ, payload = "OrderShipped", `{"carrier":"DHL"}`
			} else {
				paid = append(paid, id)
			}
			value := fmt.Appendf(nil, `{"eventId":%q,"aggregateId":%q,"type":%q,"payload":%s}`, id, order, typ, payload)
			recs = append(recs, kafkatest.Record{Key: order, Value: value})
			if i%5 == 0 {
				recs = append(recs, kafkatest.Record{Key: order, Value: value})
			}
			if i%7 == 0 {
				later = append(later, kafkatest.Record{Key: "replay-" + id, Value: value})
			}
		}
		if p == 0 {
			recs = append(recs,
				kafkatest.Record{Key: "order-x", Value: []byte(`{"type":"OrderPaid","payload":{}}`)}, // no eventId
				kafkatest.Record{Key: "order-y", Value: fmt.Appendf(nil,
					`{"eventId":"%s-nopay","type":"OrderPaid","payload":{"orderId":"order-y"}}`, prefix)}) // no paymentId
		}
		if p == 2 {
			recs = append(recs, later...)
		}
		phases = append(phases, recs)
	}
	return phases, paid
}

// TestSettlementExampleUnderSIGKILL: the settlement example binary, killed
// twice while it writes, settles every paid order exactly once and audits
// it exactly once, and dead-letters only the two events it must reject.
func TestSettlementExampleUnderSIGKILL(t *testing.T) {
	e := newEnv(t, 3)
	group := e.group("settlement")
	settlements, audit := unique("settlements"), unique("audit")
	dropTopics(t, e.brokers, settlements, audit)
	for _, topic := range []string{settlements, audit} {
		if err := kafkatest.CreateTopic(e.brokers, topic, 3); err != nil {
			t.Fatal(err)
		}
	}
	phases, paid := settlementPhases(group, 20000)
	exampleKills{
		bin: buildExample(t, "settlement"), brokers: e.brokers, group: group, input: e.input, phases: phases,
		args:     []string{"--group", group, "--input", e.input, "--settlements", settlements, "--audit", audit},
		progress: settlements,
	}.run(t)

	ctx := t.Context()
	read := func(topic string) []kafkatest.Record {
		recs, err := kafkatest.ReadAll(ctx, e.brokers, topic)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	// The verifier's tally, with the input reduced to the events that
	// must be settled: settlements and audit records carry the event ID in
	// "eventId", the field the service dedups by.
	dec := wire.Decoder{ID: wire.DefaultIDSource()}
	decode := func(recs []kafkatest.Record) []verify.Record {
		out := make([]verify.Record, len(recs))
		for i, r := range recs {
			out[i] = verify.Decode(dec, r.Partition, r.Offset, r.Value, nil)
		}
		return out
	}
	mustSettle := map[string]bool{}
	for _, id := range paid {
		mustSettle[id] = true
	}
	var input []verify.Record
	for _, r := range decode(read(e.input)) {
		if mustSettle[r.Key] {
			input = append(input, r)
		}
	}
	settled := read(settlements)
	for _, topic := range []struct {
		name string
		recs []kafkatest.Record
	}{{settlements, settled}, {audit, read(audit)}} {
		r := verify.Build(input, decode(topic.recs), nil)
		if !r.OK() || r.InputEvents != len(paid) || r.UnexpectedEvents != 0 || len(r.UndecodableOutput) != 0 || r.OutputRecords != len(paid) {
			t.Errorf("%s: %d records for %d events: missing %d, duplicated %d, unexpected %d, undecodable %v",
				topic.name, r.OutputRecords, len(paid), r.MissingEvents, r.DuplicatedEvents, r.UnexpectedEvents, r.UndecodableOutput)
		}
	}
	for _, s := range settled {
		var v struct{ PaymentID string }
		if err := json.Unmarshal(s.Value, &v); err != nil || s.Key != v.PaymentID {
			t.Fatalf("settlement keyed %q, want its payment ID: %s (%v)", s.Key, s.Value, err)
		}
	}
	dead := map[string]int{}
	for _, r := range read(group + "-dlq") {
		dead[string(r.Headers[dedup.HeaderDLQReason])]++
	}
	if want := map[string]int{"no-id": 1, dedup.ReasonHandlerPermanent: 1}; fmt.Sprint(dead) != fmt.Sprint(want) {
		t.Errorf("dead letters by reason %v, want %v", dead, want)
	}
}

// cloudEventsPhases is the cloudevents example's input in three phases of n
// events each, as a publisher that mints a CloudEvents id per publish call
// writes it: keyed by order ID, every third event an order created
// (analytics only) and the others shipped (analytics and a notification);
// every fifth published again at once, every seventh again at the end of
// the next phase under another key (mostly another partition, after a kill), each
// copy with a new CloudEvents id. The first phase also holds two events the
// worker rejects. It returns the event IDs every event must reach
// analytics under, and those that must be notified.
func cloudEventsPhases(prefix string, n int) (phases [][]kafkatest.Record, all, shipped []string) {
	var later []kafkatest.Record
	publish := 0
	ce := func(key, typ, data string) kafkatest.Record {
		publish++
		return kafkatest.Record{Key: key, Value: fmt.Appendf(nil,
			`{"specversion":"1.0","id":"ce-%d","source":"/orders","type":%q,"data":%s}`, publish, typ, data)}
	}
	for p := range 3 {
		recs := later
		later = nil
		for i := p * n; i < (p+1)*n; i++ {
			id, order := fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("o-%d", i%101)
			typ, data := "com.example.order.created", fmt.Sprintf(`{"eventId":%q,"orderId":%q}`, id, order)
			if i%3 != 0 {
				typ = "com.example.order.shipped"
				data = fmt.Sprintf(`{"eventId":%q,"orderId":%q,"customerId":"c-%d","carrier":"DHL","trackingCode":"T%d"}`, id, order, i%13, i)
				shipped = append(shipped, id)
			}
			all = append(all, id)
			recs = append(recs, ce(order, typ, data))
			if i%5 == 0 {
				recs = append(recs, ce(order, typ, data))
			}
			if i%7 == 0 {
				later = append(later, ce("replay-"+id, typ, data))
			}
		}
		if p == 0 {
			recs = append(recs,
				ce("o-x", "com.example.order.shipped", fmt.Sprintf(`{"eventId":"%s-bad","orderId":"o-x","customerId":7}`, prefix)),
				ce("o-y", "com.example.order.shipped", `{"orderId":"o-y","customerId":"c-1"}`)) // no data.eventId
		}
		if p == 2 {
			recs = append(recs, later...)
		}
		phases = append(phases, recs)
	}
	return phases, all, shipped
}

// TestCloudEventsExampleUnderSIGKILL: the cloudevents example binary,
// killed twice while it writes, sends every event to analytics exactly once
// under its stable ID (ce_id), notifies every shipped order exactly once,
// and dead-letters only the two events it must reject.
func TestCloudEventsExampleUnderSIGKILL(t *testing.T) {
	e := newEnv(t, 3)
	group := e.group("notifier")
	notifications, analytics := unique("notifications"), unique("analytics")
	dropTopics(t, e.brokers, notifications, analytics)
	for _, topic := range []string{notifications, analytics} {
		if err := kafkatest.CreateTopic(e.brokers, topic, 3); err != nil {
			t.Fatal(err)
		}
	}
	phases, all, shipped := cloudEventsPhases(group, 20000)
	exampleKills{
		bin: buildExample(t, "cloudevents"), brokers: e.brokers, group: group, input: e.input, phases: phases,
		args:     []string{"--group", group, "--input", e.input, "--notifications", notifications, "--analytics", analytics},
		progress: analytics,
	}.run(t)

	read := func(topic string) []kafkatest.Record {
		recs, err := kafkatest.ReadAll(t.Context(), e.brokers, topic)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	exactlyOnce(t, analytics, countBy(t, analytics, read(analytics), func(r kafkatest.Record) (string, error) {
		if id := string(r.Headers["ce_id"]); id != "" {
			return id, nil
		}
		return "", errors.New("no ce_id header")
	}), all)
	exactlyOnce(t, notifications, countBy(t, notifications, read(notifications), func(r kafkatest.Record) (string, error) {
		var n struct{ EventID string }
		err := json.Unmarshal(r.Value, &n)
		if h := string(r.Headers["event-id"]); err == nil && h != n.EventID {
			err = fmt.Errorf("event-id header %q, body eventId %q", h, n.EventID)
		}
		return n.EventID, err
	}), shipped)
	dead := map[string]int{}
	for _, r := range read(group + "-dlq") {
		dead[string(r.Headers[dedup.HeaderDLQReason])]++
	}
	if want := map[string]int{"no-id": 1, dedup.ReasonHandlerPermanent: 1}; fmt.Sprint(dead) != fmt.Sprint(want) {
		t.Errorf("dead letters by reason %v, want %v", dead, want)
	}
}
