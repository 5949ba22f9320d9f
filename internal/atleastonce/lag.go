package atleastonce

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
)

// lagInterval is how often the consumer lag is reported, as the
// exactly-once runtime does (processor/lag.go): on a timer, so that it grows
// with new input while the handler is busy with older records.
const lagInterval = time.Second

// lagNetTimeout bounds each network step of the lag's own client, shorter
// than goka's 30 s, so that a stop waits for at most a few of them when a
// broker cannot be reached.
const lagNetTimeout = 5 * time.Second

// lagWatch reports dedup_consumer_lag_records for the best-effort runtime:
// for each input and loop partition the goka processor holds, the
// partition's high-water mark minus the next offset to process.
//
// The next offset is the one after the last record the callback processed
// (processed), told by the partition's goroutine. That is what the
// exactly-once runtime counts too (the loop's progress, committed or not),
// and it costs a locked map write per record and no request. goka's
// committed offset would not do: goka auto-commits every --commit-interval,
// so a caught-up worker would show the records since the last commit as lag,
// and reading it is a request to the coordinator each second. The committed
// offset is read once per assigned partition only, as the start until the
// first record is processed (a partition with nothing to process never gets
// one); where the group has none, goka starts at the oldest offset.
//
// The held partitions come from goka's rebalance callback (assigned, at the
// start of each group session) and leave with their table (closed: goka
// closes a partition's table when it is revoked or the processor stops), or
// all at once when the processor's Run returned (reset). Each of them drops
// the partition's series through forget, under the lock a report takes: a
// report that read the offsets before the partition left does not bring its
// series back.
type lagWatch struct {
	topics   []string // the inputs and the loop topic: goka consumes all of them
	interval time.Duration
	report   func(topic string, partition int32, records int64)
	forget   func(partition int32)
	log      *slog.Logger

	mu   sync.Mutex
	held map[int32]map[string]int64 // next offset to process by partition and topic; -1: not known yet
}

// lagOffsets is what the lag watch asks Kafka: kafkaOffsets, or a fake in
// tests.
type lagOffsets interface {
	// highWaterMark is the partition's log end offset.
	highWaterMark(topic string, partition int32) (int64, error)
	// startOffsets is where the group resumes on each partition.
	startOffsets(partitions map[string][]int32) (map[string]map[int32]int64, error)
	close() error
}

func newLagWatch(topics []string, report func(string, int32, int64), forget func(int32), log *slog.Logger) *lagWatch {
	return &lagWatch{topics: topics, interval: lagInterval, report: report, forget: forget, log: log}
}

// assigned is goka's rebalance callback: the partitions of the new session.
// A partition held before starts over, as the group resumes it from its
// committed offset.
func (w *lagWatch) assigned(a goka.Assignment) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.held {
		if _, ok := a[p]; !ok {
			w.forget(p)
		}
	}
	w.held = make(map[int32]map[string]int64, len(a))
	for p := range a {
		next := make(map[string]int64, len(w.topics))
		for _, t := range w.topics {
			next[t] = -1
		}
		w.held[p] = next
	}
}

// processed is told each record the callback processed.
func (w *lagWatch) processed(topic string, partition int32, offset int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if next, ok := w.held[partition]; ok {
		if _, ok := next[topic]; ok {
			next[topic] = offset + 1
		}
	}
}

// closed is told that goka closed the partition's table.
func (w *lagWatch) closed(partition int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.held, partition)
	w.forget(partition)
}

// reset drops every partition: the processor's Run returned, and a session
// whose setup failed may not have opened, so not closed, every table.
func (w *lagWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.held {
		w.forget(p)
	}
	w.held = nil
}

type topicPartition struct {
	topic     string
	partition int32
}

// tick reports the lag of every held partition whose offsets it could read.
func (w *lagWatch) tick(src lagOffsets) error {
	w.mu.Lock()
	var parts []topicPartition
	unknown := map[string][]int32{}
	for p, next := range w.held {
		for t, n := range next {
			parts = append(parts, topicPartition{t, p})
			if n < 0 {
				unknown[t] = append(unknown[t], p)
			}
		}
	}
	w.mu.Unlock()

	var errs []error
	if len(unknown) > 0 {
		starts, err := src.startOffsets(unknown)
		if err != nil {
			errs = append(errs, err)
		}
		w.mu.Lock()
		for t, offsets := range starts {
			for p, off := range offsets {
				// Not over a record processed meanwhile, nor into a
				// partition that left.
				if n, ok := w.held[p][t]; ok && n < 0 {
					w.held[p][t] = off
				}
			}
		}
		w.mu.Unlock()
	}
	marks := make(map[topicPartition]int64, len(parts))
	for _, tp := range parts {
		hwm, err := src.highWaterMark(tp.topic, tp.partition)
		if err != nil {
			errs = append(errs, fmt.Errorf("high-water mark of %s/%d: %w", tp.topic, tp.partition, err))
			continue
		}
		marks[tp] = hwm
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	for tp, hwm := range marks {
		// The next offset as of now: records processed since the mark was
		// read may pass it, hence the floor at 0.
		if next, ok := w.held[tp.partition][tp.topic]; ok && next >= 0 {
			w.report(tp.topic, tp.partition, max(hwm-next, 0))
		}
	}
	return errors.Join(errs...)
}

// start reports the lag every interval until the returned function is
// called, which waits for it to stop. Its Kafka client is made when a
// partition is first held (and again after that failed) and closed at the
// stop.
func (w *lagWatch) start(newOffsets func() (lagOffsets, error)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var src lagOffsets
		defer func() {
			if src != nil {
				if err := src.close(); err != nil {
					w.log.Warn("consumer lag: closing its Kafka client", "err", err)
				}
			}
		}()
		tick := time.NewTicker(w.interval)
		defer tick.Stop()
		failing := false
		for {
			select {
			case <-tick.C:
			case <-done:
				return
			}
			if !w.holdsAny() {
				continue
			}
			var err error
			if src == nil {
				var s lagOffsets
				if s, err = newOffsets(); err == nil {
					src = s
				}
			}
			if err == nil {
				err = w.tick(src)
			}
			// Once per failure, not every second.
			switch {
			case err != nil && !failing:
				w.log.Warn("consumer lag: reading offsets failed; retrying every second, logged again once it works", "err", err)
			case err == nil && failing:
				w.log.Info("consumer lag: reading offsets works again")
			}
			failing = err != nil
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

func (w *lagWatch) holdsAny() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.held) > 0
}

// kafkaOffsets reads the offsets with a client of its own, connected as
// goka's clients are (the same sarama config: TLS, SASL, client ID).
type kafkaOffsets struct {
	group   string
	initial int64 // where goka starts without a committed offset
	client  sarama.Client
	admin   sarama.ClusterAdmin
}

func newKafkaOffsets(brokers []string, sc *sarama.Config, group string) (*kafkaOffsets, error) {
	c := *sc
	c.Net.DialTimeout, c.Net.ReadTimeout, c.Net.WriteTimeout = lagNetTimeout, lagNetTimeout, lagNetTimeout
	client, err := sarama.NewClient(brokers, &c)
	if err != nil {
		return nil, fmt.Errorf("consumer lag client: %w", err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("consumer lag admin client: %w", err)
	}
	return &kafkaOffsets{group: group, initial: sc.Consumer.Offsets.Initial, client: client, admin: admin}, nil
}

// highWaterMark asks the partition's leader (ListOffsets, one request per
// partition; sarama refreshes a moved leader and asks again). Without
// isolation level, as goka consumes: open transactions and markers count.
func (k *kafkaOffsets) highWaterMark(topic string, partition int32) (int64, error) {
	return k.client.GetOffset(topic, partition, sarama.OffsetNewest)
}

// startOffsets reads the group's committed offsets (OffsetFetch) and, where
// there is none, the offset goka starts at. A committed offset that
// retention deleted makes the lag too large until the first record is
// processed.
func (k *kafkaOffsets) startOffsets(partitions map[string][]int32) (map[string]map[int32]int64, error) {
	resp, err := k.admin.ListConsumerGroupOffsets(k.group, partitions)
	if err != nil {
		return nil, fmt.Errorf("committed offsets of group %s: %w", k.group, err)
	}
	starts := map[string]map[int32]int64{}
	var errs []error
	for t, ps := range partitions {
		for _, p := range ps {
			b := resp.GetBlock(t, p)
			switch {
			case b == nil:
				errs = append(errs, fmt.Errorf("committed offset of %s/%d: not in the response", t, p))
				continue
			case !errors.Is(b.Err, sarama.ErrNoError):
				errs = append(errs, fmt.Errorf("committed offset of %s/%d: %w", t, p, b.Err))
				continue
			}
			off := b.Offset
			if off < 0 {
				if off, err = k.client.GetOffset(t, p, k.initial); err != nil {
					errs = append(errs, fmt.Errorf("start offset of %s/%d: %w", t, p, err))
					continue
				}
			}
			if starts[t] == nil {
				starts[t] = map[int32]int64{}
			}
			starts[t][p] = off
		}
	}
	return starts, errors.Join(errs...)
}

// close closes the admin client and, with it, the client.
func (k *kafkaOffsets) close() error { return k.admin.Close() }
