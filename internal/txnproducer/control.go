package txnproducer

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
)

// The transaction coordinator's requests, with sarama's versions for
// Kafka 2.8 and later (InitProducerId v4, AddPartitionsToTxn, AddOffsetsToTxn
// and EndTxn v3, TxnOffsetCommit v3) and the Java client's retries: a
// coordinator that moved or is loading, and CONCURRENT_TRANSACTIONS while
// the coordinator still writes the previous transaction's markers, are
// retried with Producer.Transaction.Retry's backoff; anything else ends the
// call with the broker's error.

// retryTxn runs attempt until it says not to retry, at most
// Producer.Transaction.Retry.Max more times, and returns its last error.
func (p *Producer) retryTxn(what string, attempt func() (retry bool, err error)) error {
	max := p.conf.Producer.Transaction.Retry.Max
	for n := 0; ; n++ {
		retry, err := attempt()
		if !retry || n >= max {
			return err
		}
		backoff := p.conf.Producer.Transaction.Retry.Backoff
		if f := p.conf.Producer.Transaction.Retry.BackoffFunc; f != nil {
			backoff = f(n, max)
		}
		if n == txnQuietRetries {
			slog.Debug("txnproducer: still retrying", "call", what, "transactionalId", p.id, "err", err)
		}
		time.Sleep(backoff)
	}
}

// txnQuietRetries: CONCURRENT_TRANSACTIONS after a commit is routine.
const txnQuietRetries = 20

// coordinatorRetry says whether a coordinator's error code is retried,
// refreshing the coordinator first when it moved.
func (p *Producer) coordinatorRetry(kerr sarama.KError, refresh func()) bool {
	switch kerr {
	case sarama.ErrConsumerCoordinatorNotAvailable, sarama.ErrNotCoordinatorForConsumer:
		refresh()
		return true
	case sarama.ErrOffsetsLoadInProgress, sarama.ErrConcurrentTransactions, sarama.ErrRequestTimedOut,
		sarama.ErrUnknownTopicOrPartition, sarama.ErrNotEnoughReplicas, sarama.ErrNotEnoughReplicasAfterAppend:
		return true
	}
	return false
}

func (p *Producer) refreshTxnCoordinator() { _ = p.client.RefreshTransactionCoordinator(p.id) }

// txnCoordinator is the transaction coordinator, or a retry.
func (p *Producer) txnCoordinator() (*sarama.Broker, error) {
	return p.client.TransactionCoordinator(p.id)
}

// dropped handles a request that got no answer: the connection is closed
// and the coordinator looked up again.
func (p *Producer) dropped(b *sarama.Broker) {
	_ = b.Close()
	p.refreshTxnCoordinator()
}

// txnCall sends one request to the transaction coordinator with retries:
// call returns the answer's error code, or err when no answer came (the
// connection is closed and the coordinator looked up again).
func (p *Producer) txnCall(what string, call func(c *sarama.Broker) (sarama.KError, error)) error {
	return p.retryTxn(what, func() (bool, error) {
		c, err := p.txnCoordinator()
		if err != nil {
			return true, err
		}
		kerr, err := call(c)
		if err != nil {
			p.dropped(c)
			return true, err
		}
		if kerr != sarama.ErrNoError {
			return p.coordinatorRetry(kerr, p.refreshTxnCoordinator), kerr
		}
		return false, nil
	})
}

// initProducerID gets the producer ID and a new epoch for the transactional
// ID; the coordinator aborts the previous epoch's open transaction first.
func (p *Producer) initProducerID() error {
	req := &sarama.InitProducerIDRequest{
		Version:            4,
		TransactionalID:    &p.id,
		TransactionTimeout: p.conf.Producer.Transaction.Timeout,
		ProducerID:         -1,
		ProducerEpoch:      -1,
	}
	err := p.txnCall("init producer id", func(c *sarama.Broker) (sarama.KError, error) {
		res, err := c.InitProducerID(req)
		if err != nil {
			return 0, err
		}
		if res.Err == sarama.ErrNoError {
			p.pid, p.epoch = res.ProducerID, res.ProducerEpoch
		}
		return res.Err, nil
	})
	if err != nil {
		return fmt.Errorf("init producer id for %s: %w", p.id, err)
	}
	return nil
}

// addNewPartitions adds the partitions of bs not yet in the transaction.
func (p *Producer) addNewPartitions(bs []*batch) error {
	p.mu.Lock()
	parts := map[string][]int32{}
	n := 0
	for _, b := range bs {
		if !p.inTxn[b.tp] {
			parts[b.tp.topic] = append(parts[b.tp.topic], b.tp.partition)
			n++
		}
	}
	if p.fatalErr != nil || n == 0 {
		p.mu.Unlock()
		return nil
	}
	if p.status&sarama.ProducerTxnFlagInTransaction == 0 {
		p.mu.Unlock()
		return sarama.ErrTransactionNotReady
	}
	req := &sarama.AddPartitionsToTxnRequest{Version: 3, TransactionalID: p.id, ProducerID: p.pid, ProducerEpoch: p.epoch}
	p.mu.Unlock()

	err := p.retryTxn("add partitions to transaction", func() (bool, error) {
		req.TopicPartitions = parts
		c, err := p.txnCoordinator()
		if err != nil {
			return true, err
		}
		res, err := c.AddPartitionsToTxn(req)
		if err != nil {
			p.dropped(c)
			return true, err
		}
		left := map[string][]int32{}
		var retry bool
		var last error
		for topic, perrs := range res.Errors {
			for _, pe := range perrs {
				if pe.Err == sarama.ErrNoError {
					p.mu.Lock()
					p.inTxn[topicPartition{topic, pe.Partition}] = true
					p.mu.Unlock()
					continue
				}
				if !p.coordinatorRetry(pe.Err, p.refreshTxnCoordinator) {
					return false, fmt.Errorf("%s/%d: %w", topic, pe.Partition, pe.Err)
				}
				left[topic] = append(left[topic], pe.Partition)
				retry, last = true, pe.Err
			}
		}
		parts = left
		return retry, last
	})
	if err != nil {
		return fmt.Errorf("add partitions to transaction: %w", err)
	}
	return nil
}

// addOffsets adds the group's offsets: AddOffsetsToTxn at the transaction
// coordinator, then TxnOffsetCommit at the group coordinator.
func (p *Producer) addOffsets(offsets map[string][]*sarama.PartitionOffsetMetadata, meta *sarama.ConsumerGroupMetadata) error {
	group := meta.GroupID
	err := p.txnCall("add offsets to transaction", func(c *sarama.Broker) (sarama.KError, error) {
		res, err := c.AddOffsetsToTxn(&sarama.AddOffsetsToTxnRequest{
			Version: 3, TransactionalID: p.id, ProducerID: p.pid, ProducerEpoch: p.epoch, GroupID: group,
		})
		if err != nil {
			return 0, err
		}
		return res.Err, nil
	})
	if err != nil {
		return err
	}
	refreshGroup := func() { _ = p.client.RefreshCoordinator(group) }
	err = p.retryTxn("commit offsets in transaction", func() (bool, error) {
		c, err := p.client.Coordinator(group)
		if err != nil {
			return true, err
		}
		res, err := c.TxnOffsetCommit(&sarama.TxnOffsetCommitRequest{
			Version: 3, TransactionalID: p.id, GroupID: group, ProducerID: p.pid, ProducerEpoch: p.epoch,
			GenerationID: meta.GenerationID, MemberID: meta.MemberID, GroupInstanceID: meta.GroupInstanceID,
			Topics: offsets,
		})
		if err != nil {
			_ = c.Close()
			refreshGroup()
			return true, err
		}
		left := map[string][]*sarama.PartitionOffsetMetadata{}
		var retry bool
		var last error
		for topic, perrs := range res.Topics {
			for _, pe := range perrs {
				if pe.Err == sarama.ErrNoError {
					continue
				}
				if !p.coordinatorRetry(pe.Err, refreshGroup) {
					return false, fmt.Errorf("%s/%d: %w", topic, pe.Partition, pe.Err)
				}
				for _, o := range offsets[topic] {
					if o.Partition == pe.Partition {
						left[topic] = append(left[topic], o)
					}
				}
				retry, last = true, pe.Err
			}
		}
		offsets = left
		return retry, last
	})
	if err != nil {
		return fmt.Errorf("TxnOffsetCommit to group %s: %w", group, err)
	}
	return nil
}

// sendEndTxn commits or aborts the transaction at its coordinator. A retry
// of an EndTxn the coordinator already completed is answered with success.
func (p *Producer) sendEndTxn(commit bool) error {
	what := "commit transaction"
	if !commit {
		what = "abort transaction"
	}
	return p.txnCall(what, func(c *sarama.Broker) (sarama.KError, error) {
		res, err := c.EndTxn(&sarama.EndTxnRequest{
			Version: 3, TransactionalID: p.id, ProducerID: p.pid, ProducerEpoch: p.epoch, TransactionResult: commit,
		})
		if err != nil {
			return 0, err
		}
		return res.Err, nil
	})
}
