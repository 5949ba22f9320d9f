package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/verify"
	"github.com/dedupkit/dedup/internal/wire"
)

// result is what one scenario did and what the verification found.
type result struct {
	mode, input, output, dlq, group, dir string

	produced                     *produced
	faults                       faultCounts
	crashes                      []crash
	unclean                      []string // workers that did not stop cleanly on SIGTERM
	incarnations                 int
	produceSeconds, drainSeconds float64
	durability                   string
	notes                        []string // things that did not go as planned

	report *verify.Report // good events: missing and duplicated, with positions

	// Malformed records, matched by their chaos-bad header.
	badInput      map[string]int // input records by kind
	badDLQ        map[string]int // their dead-letter records by dlq-reason
	notDLQ        []string       // kind/n @ input position: never dead-lettered
	doubleDLQ     []string       // dead-lettered more often than on the input
	wrongReason   []string       // dead-lettered with another reason than expected
	notDLQCount   int
	doubleCount   int
	wrongCount    int
	otherDLQ      map[string]int // dead letters that are not injected records, by reason
	lostAcked     int            // acknowledged events not on the input topic
	lostAckedList []string
}

// check verifies the run: the verifier for the good events, then every
// injected malformed record against the dead-letter topic, and every
// acknowledged event against the input topic.
func (r *result) check(ctx context.Context, cfg *Config, brokers []string) error {
	rep, err := verify.Run(ctx, verify.Config{Brokers: brokers, Inputs: []string{r.input}, Output: r.output, DLQ: r.dlq, IDSource: wire.DefaultIDSource()})
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	r.report = rep

	client, err := sarama.NewClient(brokers, kafkatest.Config())
	if err != nil {
		return err
	}
	defer client.Close()
	type badIn struct {
		count int
		pos   string
	}
	var mu sync.Mutex
	inputBad, dlqBad := map[string]*badIn{}, map[string][]string{} // kind/n -> input copies; dlq reasons
	r.otherDLQ = map[string]int{}
	seen := make([]bool, cfg.Events)
	err = readTopic(ctx, client, r.input, func(p int32, off int64, rec *sarama.Record) {
		mu.Lock()
		defer mu.Unlock()
		if id := header(rec, headerBad); id != "" {
			b := inputBad[id]
			if b == nil {
				b = &badIn{pos: fmt.Sprintf("p%d@%d", p, off)}
				inputBad[id] = b
			}
			b.count++
			return
		}
		if n, ok := eventNumber(jsonID(rec.Value)); ok && n < len(seen) {
			seen[n] = true
		}
	})
	if err != nil {
		return err
	}
	err = readTopic(ctx, client, r.dlq, func(p int32, off int64, rec *sarama.Record) {
		mu.Lock()
		defer mu.Unlock()
		reason := header(rec, dedup.HeaderDLQReason)
		if id := header(rec, headerBad); id != "" {
			dlqBad[id] = append(dlqBad[id], reason)
			return
		}
		r.otherDLQ[fmt.Sprintf("%s (p%d@%d)", reason, p, off)]++
	})
	if err != nil {
		return err
	}

	r.badInput, r.badDLQ = map[string]int{}, map[string]int{}
	for _, id := range slices.Sorted(maps.Keys(inputBad)) {
		in := inputBad[id]
		kind, _, _ := strings.Cut(id, "/")
		r.badInput[kind] += in.count
		reasons := dlqBad[id]
		for _, reason := range reasons {
			r.badDLQ[reason]++
		}
		want := badKinds[kind].reason
		switch {
		case len(reasons) == 0:
			r.notDLQCount++
			r.notDLQ = appendMax(r.notDLQ, fmt.Sprintf("%s at input %s", id, in.pos))
		case len(reasons) > in.count:
			r.doubleCount++
			r.doubleDLQ = appendMax(r.doubleDLQ, fmt.Sprintf("%s at input %s: %d dead letters for %d input records", id, in.pos, len(reasons), in.count))
		}
		for _, reason := range reasons {
			if reason != want {
				r.wrongCount++
				r.wrongReason = appendMax(r.wrongReason, fmt.Sprintf("%s at input %s: dlq-reason %q, want %q", id, in.pos, reason, want))
				break
			}
		}
	}
	for id := range dlqBad {
		if inputBad[id] == nil {
			r.otherDLQ["injected record not on the input: "+id]++
		}
	}
	if r.produced != nil {
		for n, acked := range r.produced.acked {
			if acked && !seen[n] {
				r.lostAcked++
				r.lostAckedList = appendMax(r.lostAckedList, fmt.Sprintf("e-%d", n))
			}
		}
	}
	return nil
}

func appendMax(list []string, s string) []string {
	if len(list) < 20 {
		list = append(list, s)
	}
	return list
}

// readTopic reads every partition of topic read_committed, concurrently.
func readTopic(ctx context.Context, client sarama.Client, topic string, fn func(p int32, off int64, rec *sarama.Record)) error {
	parts, err := client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", topic, err)
	}
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() {
			from, to, err := kafkautil.Bounds(client, topic, p)
			if err == nil {
				_, err = kafkautil.ReadCommitted(ctx, client, topic, p, from, to, func(off int64, rec *sarama.Record) error {
					fn(p, off, rec)
					return nil
				})
			}
			if err != nil {
				errs[i] = fmt.Errorf("read %s/%d: %w", topic, p, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func header(rec *sarama.Record, key string) string {
	for _, h := range rec.Headers {
		if string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

// jsonID finds the eventId string of one of the load's own events without a
// full decode (the verifier decodes every record anyway).
func jsonID(value []byte) string {
	const field = `"eventId":"`
	i := bytes.Index(value, []byte(field))
	if i < 0 {
		return ""
	}
	rest := value[i+len(field):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// failures lists why the scenario does not pass; only exactly-once is held
// to it, best-effort is reported.
func (r *result) failures() []string {
	var f []string
	if r.report == nil {
		return []string{"not verified"}
	}
	if r.report.MissingEvents > 0 {
		f = append(f, fmt.Sprintf("%d events missing from the output", r.report.MissingEvents))
	}
	if r.report.DuplicatedEvents > 0 {
		f = append(f, fmt.Sprintf("%d events output more than once", r.report.DuplicatedEvents))
	}
	if r.report.UnexpectedEvents > 0 {
		f = append(f, fmt.Sprintf("%d output IDs never on the input", r.report.UnexpectedEvents))
	}
	if r.notDLQCount > 0 {
		f = append(f, fmt.Sprintf("%d malformed records not dead-lettered", r.notDLQCount))
	}
	if r.doubleCount > 0 {
		f = append(f, fmt.Sprintf("%d malformed records dead-lettered more than once", r.doubleCount))
	}
	if r.wrongCount > 0 {
		f = append(f, fmt.Sprintf("%d malformed records with an unexpected dlq-reason", r.wrongCount))
	}
	if len(r.otherDLQ) > 0 {
		f = append(f, fmt.Sprintf("%d dead letters that are not injected records", len(r.otherDLQ)))
	}
	if r.lostAcked > 0 {
		f = append(f, fmt.Sprintf("%d acknowledged events are not on the input topic", r.lostAcked))
	}
	if n := len(r.crashes) - r.startFailures(); n > 0 {
		f = append(f, fmt.Sprintf("%d workers crashed while running", n))
	}
	return append(f, r.notes...)
}

// startFailures counts the worker exits before the worker served: failed
// starts (reported; a supervisor restarts them), not crashes while running.
func (r *result) startFailures() int {
	n := 0
	for _, c := range r.crashes {
		if c.atStart {
			n++
		}
	}
	return n
}

// print writes the scenario's figures, the verifier's report and, on
// failure, where to look.
func (r *result) print(w io.Writer, cfg *Config) {
	fmt.Fprintf(w, "\n=== %s: group %s, input %s, output %s, dead letters %s\n", r.mode, r.group, r.input, r.output, r.dlq)
	if p := r.produced; p != nil {
		dups := p.records - sum(p.bad) - countTrue(p.acked)
		fmt.Fprintf(w, "load:     %d records acknowledged in %.0fs: %d distinct events, %d duplicates, %d malformed %s; %d records re-sent after errors\n",
			p.records, r.produceSeconds, countTrue(p.acked), dups, sum(p.bad), byKey(p.bad), p.retries)
		for _, e := range p.errors {
			fmt.Fprintf(w, "          send error %s\n", e)
		}
	}
	fmt.Fprintf(w, "faults:   %s\n", &r.faults)
	fmt.Fprintf(w, "workers:  %d incarnations; %d crashed while running, %d failed to start (restarted); caught up %.0fs after the load\n",
		r.incarnations, len(r.crashes)-r.startFailures(), r.startFailures(), r.drainSeconds)
	for _, c := range r.crashes {
		what := "crashed"
		if c.atStart {
			what = "failed to start"
		}
		fmt.Fprintf(w, "          w%d incarnation %d %s: %v: %s (log %s)\n", c.slot+1, c.inc, what, c.err, c.lastLine, c.logPath)
	}
	for _, u := range r.unclean {
		fmt.Fprintf(w, "          unclean stop: %s\n", u)
	}
	if r.durability != "" {
		fmt.Fprintf(w, "topics:   %s\n", r.durability)
	}
	if r.report != nil {
		fmt.Fprintln(w, "verifier (read_committed):")
		var b strings.Builder
		r.report.Print(&b, 20)
		for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
			fmt.Fprintf(w, "  %s\n", line)
		}
		fmt.Fprintf(w, "malformed: %d on the input %s; dead-lettered %d %s; not dead-lettered %d, more than once %d, unexpected reason %d\n",
			sum(r.badInput), byKey(r.badInput), sum(r.badDLQ), byKey(r.badDLQ), r.notDLQCount, r.doubleCount, r.wrongCount)
		for _, l := range [][]string{r.notDLQ, r.doubleDLQ, r.wrongReason} {
			for _, s := range l {
				fmt.Fprintf(w, "  %s\n", s)
			}
		}
		for k, n := range r.otherDLQ {
			fmt.Fprintf(w, "  other dead letter: %s x%d\n", k, n)
		}
		fmt.Fprintf(w, "input:    %d acknowledged events missing from the input topic %v\n", r.lostAcked, r.lostAckedList)
	}
	for _, n := range r.faults.notes {
		fmt.Fprintf(w, "note:     %s\n", n)
	}
	for _, n := range r.notes {
		fmt.Fprintf(w, "note:     %s\n", n)
	}
	fmt.Fprintf(w, "logs:     %s (timeline.log, workers/w<slot>-<incarnation>.log)\n", r.dir)
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func byKey(m map[string]int) string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s = append(s, fmt.Sprintf("%s %d", k, m[k]))
	}
	return "(" + strings.Join(s, ", ") + ")"
}
