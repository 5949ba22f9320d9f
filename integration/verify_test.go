package integration

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/verify"
	"github.com/dedupkit/dedup/internal/wire"
	"github.com/dedupkit/dedup/processor"
)

// verifyPair creates an input and an output topic of three partitions each
// and writes in and out to them, returning the topics and the written
// records with their positions.
func verifyPair(t *testing.T, bs []string, in, out []kafkatest.Record) (inTopic, outTopic string, inRecs, outRecs []kafkatest.Record) {
	t.Helper()
	inTopic, outTopic = unique("vin"), unique("vout")
	dropTopics(t, bs, inTopic, outTopic)
	var err error
	for _, topic := range []string{inTopic, outTopic} {
		if err = kafkatest.CreateTopic(bs, topic, 3); err != nil {
			t.Fatal(err)
		}
	}
	if inRecs, err = kafkatest.Produce(bs, inTopic, in); err != nil {
		t.Fatal(err)
	}
	if outRecs, err = kafkatest.Produce(bs, outTopic, out); err != nil {
		t.Fatal(err)
	}
	return inTopic, outTopic, inRecs, outRecs
}

// verifyRun runs the verifier and fails the test if it does not finish: a
// read that waits for a transaction marker would hang here.
func verifyRun(t *testing.T, cfg verify.Config) *verify.Report {
	t.Helper()
	if cfg.IDSource == (wire.IDSource{}) {
		cfg.IDSource = wire.DefaultIDSource()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := verify.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return r
}

func TestVerifyCleanTopics(t *testing.T) {
	bs := brokers(t)
	junk := kafkatest.Record{Key: "z", Value: []byte("not JSON")}
	in, out, _, _ := verifyPair(t, bs,
		[]kafkatest.Record{event("e1", "a"), event("e1", "a"), event("e2", "b"), junk, event("e3", "c"), event("e2", "b")},
		[]kafkatest.Record{event("e1", "a"), event("e2", "b"), event("e3", "c")})
	dlq := unique("vdlq")
	dropTopics(t, bs, dlq)
	if err := kafkatest.CreateTopic(bs, dlq, 1); err != nil {
		t.Fatal(err)
	}
	junk.Headers = map[string][]byte{dedup.HeaderDLQReason: []byte("not-json")}
	if _, err := kafkatest.Produce(bs, dlq, []kafkatest.Record{junk}); err != nil {
		t.Fatal(err)
	}

	r := verifyRun(t, verify.Config{Brokers: bs, Inputs: []string{in}, Output: out, DLQ: dlq})
	if !r.OK() || r.InputRecords != 6 || r.InputEvents != 3 || r.InputDuplicates != 2 || r.Undecodable["not-json"] != 1 ||
		r.OutputRecords != 3 || r.OutputEvents != 3 || r.UnexpectedOutputs != 0 || r.DeadLettered["not-json"] != 1 {
		var b strings.Builder
		r.Print(&b, 20)
		t.Fatalf("report:\n%s", b.String())
	}
}

func TestVerifyNamesMissingAndDuplicated(t *testing.T) {
	bs := brokers(t)
	in, out, inRecs, outRecs := verifyPair(t, bs,
		[]kafkatest.Record{event("e1", "a"), event("e2", "b"), event("e3", "c"), event("e4", "d")},
		[]kafkatest.Record{event("e1", "a"), event("e2", "b"), event("e4", "d"), event("e2", "b")})

	r := verifyRun(t, verify.Config{Brokers: bs, Inputs: []string{in}, Output: out})
	var b strings.Builder
	r.Print(&b, 20)
	if r.OK() || r.Err() == nil || r.MissingEvents != 1 || r.DuplicatedEvents != 1 || len(r.Missing) != 1 || len(r.Duplicated) != 1 {
		t.Fatalf("report:\n%s", b.String())
	}
	pos := func(rec kafkatest.Record) verify.Position {
		return verify.Position{Topic: in, Partition: rec.Partition, Offset: rec.Offset}
	}
	if m := r.Missing[0]; m.ID != "e3" || len(m.Inputs) != 1 || m.Inputs[0] != pos(inRecs[2]) || len(m.Outputs) != 0 {
		t.Errorf("missing trace %+v, want e3 at input %v", m, pos(inRecs[2]))
	}
	d := r.Duplicated[0]
	if d.ID != "e2" || d.OutputCount != 2 || len(d.Outputs) != 2 || d.Inputs[0] != pos(inRecs[1]) {
		t.Fatalf("duplicated trace %+v", d)
	}
	outPos := func(rec kafkatest.Record) verify.Position {
		return verify.Position{Topic: out, Partition: rec.Partition, Offset: rec.Offset}
	}
	if got, want := []verify.Position{d.Outputs[0], d.Outputs[1]}, []verify.Position{outPos(outRecs[1]), outPos(outRecs[3])}; got[0] != want[0] || got[1] != want[1] {
		t.Errorf("duplicated e2 at outputs %v, want %v", got, want)
	}
	for _, want := range []string{`"e3"  input ` + pos(inRecs[2]).String(), `"e2"  input `, "FAIL: missing 1 (input events with no output), duplicated 1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestVerifyTransactionalOutput writes the output in transactions, aborted
// and committed, so that each partition ends in a transaction marker: the
// verifier must count only committed records and still reach the end.
func TestVerifyTransactionalOutput(t *testing.T) {
	bs := brokers(t)
	var ins []kafkatest.Record
	for _, id := range []string{"e1", "e2", "e3", "e4", "e5", "e6"} {
		ins = append(ins, event(id, id))
	}
	in, _, _, _ := verifyPair(t, bs, ins, nil)
	out := unique("vtxn")
	dropTopics(t, bs, out)
	if err := kafkatest.CreateTopic(bs, out, 2); err != nil {
		t.Fatal(err)
	}
	lastData := verifyProduceTxns(t, bs, out, []verifyTxn{
		{false, [2][]string{{"e1", "e99"}, {"e2"}}},                 // aborted: would duplicate e1, e2 and add e99
		{true, [2][]string{{"e1", "e3", "e5"}, {"e2", "e4", "e6"}}}, // committed: ends partition 0
		{false, [2][]string{nil, {"e4", "e100"}}},                   // aborted: ends partition 1
	})
	// EndTxn returns once the coordinator has decided; it writes the markers
	// after, and until they land the LSO stays at the transaction's first
	// offset. Wait until every partition's LSO is past its last data record:
	// its last offset is then a marker.
	client, err := sarama.NewClient(bs, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	lsos := map[int32]int64{}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		for p := range int32(2) {
			if _, lsos[p], err = kafkautil.Bounds(client, out, p); err != nil {
				t.Fatal(err)
			}
		}
		if lsos[0]-1 > lastData[0] && lsos[1]-1 > lastData[1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("LSOs %v, last data records %v: the markers were never written", lsos, lastData)
		}
	}

	start := time.Now()
	r := verifyRun(t, verify.Config{Brokers: bs, Inputs: []string{in}, Output: out})
	if !r.OK() || r.OutputRecords != 6 || r.OutputEvents != 6 || r.UnexpectedOutputs != 0 || r.InputEvents != 6 {
		var b strings.Builder
		r.Print(&b, 20)
		t.Fatalf("report:\n%s", b.String())
	}
	t.Logf("verified %s (LSOs %v) in %v", out, lsos, time.Since(start))
}

// verifyTxn is one transaction: IDs for partitions 0 and 1, committed or not.
type verifyTxn struct {
	commit bool
	ids    [2][]string
}

// verifyProduceTxns writes each transaction's IDs to partitions 0 and 1 with
// a transactional producer, then commits or aborts it, and returns the offset
// of the last data record written to each partition.
func verifyProduceTxns(t *testing.T, bs []string, topic string, txns []verifyTxn) map[int32]int64 {
	t.Helper()
	p, err := sarama.NewSyncProducer(bs, txnProducerConfig(unique("verify-txn")))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	last := map[int32]int64{}
	for _, tx := range txns {
		if err := p.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for part, list := range tx.ids {
			for _, id := range list {
				rec := event(id, id)
				_, off, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: int32(part),
					Key: sarama.StringEncoder(rec.Key), Value: sarama.ByteEncoder(rec.Value)})
				if err != nil {
					t.Fatal(err)
				}
				last[int32(part)] = off
			}
		}
		if tx.commit {
			err = p.CommitTxn()
		} else {
			err = p.AbortTxn()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// TestVerifyBinary runs `processor verify` on a clean and a failing pair.
func TestVerifyBinary(t *testing.T) {
	bs := brokers(t)
	bin := buildProcessor(t)
	cleanIn, cleanOut, _, _ := verifyPair(t, bs,
		[]kafkatest.Record{event("e1", "a"), event("e2", "b"), event("e1", "a")},
		[]kafkatest.Record{event("e1", "a"), event("e2", "b")})
	badIn, badOut, _, _ := verifyPair(t, bs,
		[]kafkatest.Record{event("e1", "a"), event("lost-7", "b"), event("e3", "c")},
		[]kafkatest.Record{event("e1", "a"), event("e3", "c"), event("e3", "c")})

	tests := []struct {
		args   []string
		status int
		want   []string
	}{
		{[]string{"--input", cleanIn, "--output", cleanOut}, 0, []string{"OK: all 2 input events output exactly once"}},
		{[]string{"--input", badIn, "--output", badOut, "--show", "5"}, 1,
			[]string{`"lost-7"  input p`, `"e3"  input p`, "processor verify: FAIL: missing 1 (input events with no output), duplicated 1 (events output more than once)"}},
		{[]string{"--input", cleanIn}, 1, []string{"processor verify: --output: required"}},
		{[]string{"--input", cleanIn, "--output", unique("nosuch")}, 1, []string{"processor verify: partitions of"}},
	}
	for _, tt := range tests {
		args := append([]string{"verify", "--brokers", strings.Join(bs, ",")}, tt.args...)
		cmd := exec.Command(bin, args...)
		out, err := cmd.CombinedOutput()
		status := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			status = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if status != tt.status {
			t.Errorf("%v: exit status %d, want %d\n%s", args, status, tt.status, out)
		}
		for _, w := range tt.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%v: output lacks %q:\n%s", args, w, out)
			}
		}
	}
}

// TestVerifyBestEffortWorker checks a real worker's output: keyed by
// aggregate, so events go through the loop topic; one record is malformed.
func TestVerifyBestEffortWorker(t *testing.T) {
	e := newEnv(t, 3)
	group := e.group("verify")
	e.start(e.topology(group, &counter{}), t.TempDir())
	e.produce(event("e1", "a"), event("e2", "a"), event("e1", "a"), kafkatest.Record{Key: "x", Value: []byte("{}")},
		event("e3", "b"), event("e2", "a"))
	e.waitProcessed(group)

	r := verifyRun(t, verify.Config{Brokers: e.brokers, Inputs: []string{e.input}, Output: e.output, DLQ: group + "-dlq"})
	if !r.OK() || r.InputEvents != 3 || r.InputDuplicates != 2 || r.OutputRecords != 3 || r.DeadLettered["no-id"] != 1 {
		var b strings.Builder
		r.Print(&b, 20)
		t.Fatalf("report:\n%s", b.String())
	}
}

// TestVerifyTwoInputGroup checks a real exactly-once worker that reads two
// inputs, with event-ID and with aggregate-ID keys: the verifier, given both
// inputs and the worker's key type, finds every event (or aggregate) output
// once, from the library and from `processor verify`; given one input only,
// it sees outputs of the other as unexpected, and judging aggregate-ID
// output by event IDs, it sees the skipped events as missing.
func TestVerifyTwoInputGroup(t *testing.T) {
	bin := buildProcessor(t)
	for _, tc := range []struct {
		keyType dedup.KeyType
		events  int // distinct events (or aggregates) on the two inputs
	}{
		{dedup.KeyEventID, 40}, // 20 on both, 10 on each alone
		{dedup.KeyAggregateID, 7},
	} {
		t.Run(string(tc.keyType), func(t *testing.T) {
			e := newEnv(t, 3)
			group := e.group("verify-inputs")
			in := e.produceToBoth(3)
			topo := e.topology(group, &counter{})
			topo.Inputs = append(topo.Inputs, in.second)
			topo.KeyType = tc.keyType
			w := e.startEOS(topo, processor.Config{StateDir: t.TempDir()})
			e.waitInputsProcessed(group, e.input, in.second)
			w.stop(t)

			inputs := []string{e.input, in.second}
			cfg := verify.Config{Brokers: e.brokers, Inputs: inputs, Output: e.output, DLQ: group + "-dlq", KeyType: tc.keyType}
			r := verifyRun(t, cfg)
			var b strings.Builder
			r.Print(&b, 20)
			if !r.OK() || r.InputRecords != 60 || r.InputEvents != tc.events || r.OutputRecords != tc.events ||
				r.UnexpectedEvents != 0 || r.DeadLetterRecords != 0 {
				t.Fatalf("report:\n%s", b.String())
			}

			// One input only: the other's events are outputs of no input.
			one := cfg
			one.Inputs = inputs[:1]
			if r := verifyRun(t, one); tc.keyType == dedup.KeyEventID && (r.InputEvents != 30 || r.UnexpectedEvents != 10) {
				b.Reset()
				r.Print(&b, 20)
				t.Errorf("first input only: want 30 events and the second's 10 unexpected:\n%s", b.String())
			}
			if tc.keyType == dedup.KeyAggregateID {
				byEvent := cfg
				byEvent.KeyType = dedup.KeyEventID
				if r := verifyRun(t, byEvent); r.OK() || r.MissingEvents != 40-tc.events {
					b.Reset()
					r.Print(&b, 20)
					t.Errorf("aggregate-ID output judged by event IDs: want %d missing:\n%s", 40-tc.events, b.String())
				}
			}

			args := []string{"verify", "--brokers", strings.Join(e.brokers, ","), "--input", strings.Join(inputs, ","),
				"--output", e.output, "--key-type", string(tc.keyType)}
			got, err := exec.Command(bin, args...).CombinedOutput()
			unit := "events"
			if tc.keyType == dedup.KeyAggregateID {
				unit = "aggregates"
			}
			if want := fmt.Sprintf("OK: all %d input %s output exactly once", tc.events, unit); err != nil || !strings.Contains(string(got), want) {
				t.Errorf("%v: %v, want %q:\n%s", args, err, want, got)
			}
		})
	}
}
