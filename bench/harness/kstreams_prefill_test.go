package harness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dedupkit/dedup/bench/contenders"
	"github.com/dedupkit/dedup/internal/kafkatest"
)

// The failover benchmark fills Kafka Streams' table by writing its
// changelog directly (fillKStreamsTable). That is only the table Kafka
// Streams would have if the application restores those records into the
// store its tasks judge each ID in: right serdes, right partition. So the
// application, started on a prefilled changelog, must drop every event
// whose ID is in it, and pass every other event once.
func TestKStreamsRestoresThePrefilledTable(t *testing.T) {
	brokers := os.Getenv("KAFKA_BROKERS")
	if brokers == "" {
		kafkatest.Missing(t, "KAFKA_BROKERS is not set; `make test` starts a broker and sets it")
	}
	if _, _, _, err := contenders.CheckKStreams(); err != nil {
		kafkatest.Missing(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bs := strings.Split(brokers, ",")
	jar, err := contenders.BuildKStreams(ctx, logWriter(func(s string) { t.Log(strings.TrimSpace(s)) }))
	if err != nil {
		t.Fatal(err)
	}
	adm, err := newAdmin(bs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.Close() })
	app := fmt.Sprintf("kstreams-prefill-%d", time.Now().UnixNano())
	in, out := app+"-in", app+"-out"
	changelog, repartition := app+"-"+kstreamsStore+"-changelog", app+"-"+kstreamsRepartition+"-repartition"
	t.Cleanup(func() { adm.deleteTopics(in, out, changelog, repartition) }) // after the application stopped
	for topic, cfg := range map[string]map[string]string{in: nil, out: nil, changelog: tableTopicConfig} {
		if err := adm.createTopic(topic, 3, cfg); err != nil {
			t.Fatal(err)
		}
	}
	const prefilled = 300
	if err := fillKStreamsTable(ctx, bs, changelog, "pf", prefilled); err != nil {
		t.Fatal(err)
	}

	startKStreams(t, ctx, jar, "--brokers", brokers, "--input", in, "--output", out, "--application-id", app,
		"--state-dir", t.TempDir(), "--mode", "repartition", "--commit-interval-ms", "100")
	// outputsOf writes events with ids, waits until the application
	// committed them and returns the event IDs of the whole output.
	outputsOf := func(ids []string) []string {
		t.Helper()
		recs := make([]kafkatest.Record, len(ids))
		for i, id := range ids {
			recs[i] = kafkatest.Record{Key: id, Value: []byte(`{"eventId":"` + id + `"}`)}
		}
		if _, err := kafkatest.Produce(bs, in, recs); err != nil {
			t.Fatal(err)
		}
		for _, topic := range []string{in, repartition} {
			if err := kafkatest.WaitCommitted(ctx, bs, app, topic); err != nil {
				t.Fatalf("%s: %v", topic, err)
			}
		}
		if err := kafkatest.WaitSettled(ctx, bs, out); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		got, err := kafkatest.ReadAll(ctx, bs, out)
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		for _, r := range got {
			seen = append(seen, r.Key)
		}
		slices.Sort(seen)
		return seen
	}

	var old []string
	for i := 0; i < prefilled; i += 7 {
		old = append(old, prefillKey("pf", i))
	}
	if got := outputsOf(old); len(got) > 0 {
		t.Fatalf("%d of %d events whose IDs are in the prefilled changelog went to the output: %v", len(got), len(old), got)
	}
	var fresh []string
	for i := 0; i < 30; i++ {
		fresh = append(fresh, fmt.Sprintf("evt-new-%02d", i))
	}
	if got := outputsOf(fresh); !slices.Equal(got, fresh) {
		t.Fatalf("outputs %v, want each new event once: %v", got, fresh)
	}
}

// startKStreams runs the Kafka Streams application with args until the
// test ends, and returns once it printed READY.
func startKStreams(t *testing.T, ctx context.Context, jar string, args ...string) {
	t.Helper()
	cmd := exec.Command("java", append(append(slices.Clone(contenders.KStreamsJVMFlags), "-jar", jar), args...)...)
	logPath := t.TempDir() + "/kstreams.log"
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd.Stderr = logFile
	stderr := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() { // owned by the test: ends when the process closes its stdout
		sc := bufio.NewScanner(stdout)
		found := false
		for sc.Scan() {
			if !found && sc.Text() == "READY" {
				found = true
				ready <- true
			}
		}
		if !found {
			ready <- false
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("kafka streams: %v\n%s", err, stderr())
		}
	})
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("kafka streams exited before READY:\n%s", stderr())
		}
	case <-ctx.Done():
		t.Fatalf("kafka streams not READY: %v\n%s", ctx.Err(), stderr())
	}
}
