package processor

import "time"

// Hook observes the runtime: a hook is any value that implements one or
// more of the Hook interfaces in this package (HookTxnCommitted,
// HookConsumerLag, ...), and the runtime tells it only the events it
// implements. New events come as new interfaces, so a hook written today
// keeps compiling. Hooks are called from every member's goroutines: they
// must be safe for concurrent use and return quickly. The hooks of the
// topology's outcomes (processed, skipped, dead-lettered) are in package
// dedup. Config.Registerer turns on the runtime's own Prometheus metrics
// without any hook.
type Hook any

// HookTxnCommitted is told that a transaction committed: its commit took
// took, and it held records records.
type HookTxnCommitted interface {
	OnTxnCommitted(took time.Duration, records int)
}

// HookTxnAborted is told that a transaction was aborted, for reason (a
// short label).
type HookTxnAborted interface{ OnTxnAborted(reason string) }

// HookCommitStalled is told that a commit has run for another transaction
// timeout without an answer.
type HookCommitStalled interface{ OnCommitStalled() }

// HookFenced is told that another instance took this instance's
// transactional ID: this member stops.
type HookFenced interface{ OnFenced() }

// HookDeadTransactionFenced is told that the group leader aborted a
// transaction left open by a member that is no longer in the group, so its
// partitions' new owner need not wait for the transaction timeout.
type HookDeadTransactionFenced interface{ OnDeadTransactionFenced() }

// HookStuckTransactionFenced is told that a member aborted a transaction of
// another instance of the group that stayed open longer than
// Config.FenceStuckAfter and held the member's partitions.
type HookStuckTransactionFenced interface{ OnStuckTransactionFenced() }

// HookPeersWatched is told how many other instances of the group this one
// holds a liveness connection to (Config.PeerAddr), at every change.
type HookPeersWatched interface{ OnPeersWatched(n int) }

// HookInstanceDied is told that another instance of the group died: its
// liveness connection ended and its address refused a new one. fenced is
// how many of its open transactions this instance aborted.
type HookInstanceDied interface{ OnInstanceDied(fenced int) }

// HookRebalanced is told that a member's session ended for a rebalance of
// the group.
type HookRebalanced interface{ OnRebalanced() }

// HookRebalanceCompleted is told that a member is ready again after a
// rebalance, took from its join (or the end of its previous session) until
// every partition it claimed was restored.
type HookRebalanceCompleted interface{ OnRebalanceCompleted(took time.Duration) }

// HookConsumerLag is told the records of a claimed input or loop partition
// not processed yet, every second.
type HookConsumerLag interface {
	OnConsumerLag(topic string, partition int32, records int64)
}

// HookTableOpened is told that a session starts restoring a claimed
// partition's table: kept, the store the member kept open from its previous
// session (only the changelog's tail is read); otherwise opened from the
// state dir.
type HookTableOpened interface {
	OnTableOpened(partition int32, kept bool)
}

// HookRestoreProgress is told that a chunk of a partition's changelog was
// restored, remaining records to go.
type HookRestoreProgress interface {
	OnRestoreProgress(partition int32, restored, remaining int64)
}

// HookTableSize is told the seen IDs a partition's table holds.
type HookTableSize interface {
	OnTableSize(partition int32, entries int64)
}

// HookKeyFilterBytes is told the memory of a partition's key filter, told
// with its TableSize.
type HookKeyFilterBytes interface {
	OnKeyFilterBytes(partition int32, bytes int)
}

// HookSwept is told that a sweep deleted expired seen IDs from a
// partition's table.
type HookSwept interface {
	OnSwept(partition int32, deleted int)
}

// HookPartitionRevoked is told that the member closed the partition's
// table: what was reported for it is another member's to report now, so
// per-partition series should be dropped.
type HookPartitionRevoked interface{ OnPartitionRevoked(partition int32) }

// HookStandbyLag is told how far a standby replica of a partition is behind
// its changelog, after each catch-up; records < 0: the member no longer
// holds that standby.
type HookStandbyLag interface {
	OnStandbyLag(partition int32, records int64)
}

// HookCallStarted is told that a handler call started.
type HookCallStarted interface{ OnCallStarted() }

// HookCallEnded is told that a handler call returned, however it ended,
// after took (its retries and their backoff included).
type HookCallEnded interface{ OnCallEnded(took time.Duration) }

// HookKeyWaited is told that a record waited took for a call of its dedup
// key (or its record key, under OrderByRecordKey) to end.
type HookKeyWaited interface{ OnKeyWaited(took time.Duration) }

// hookList tells each event to the hooks that implement it.
type hookList []Hook

func (l hookList) TxnCommitted(took time.Duration, records int) {
	for _, h := range l {
		if x, ok := h.(HookTxnCommitted); ok {
			x.OnTxnCommitted(took, records)
		}
	}
}

func (l hookList) TxnAborted(reason string) {
	for _, h := range l {
		if x, ok := h.(HookTxnAborted); ok {
			x.OnTxnAborted(reason)
		}
	}
}

func (l hookList) CommitStalled() {
	for _, h := range l {
		if x, ok := h.(HookCommitStalled); ok {
			x.OnCommitStalled()
		}
	}
}

func (l hookList) Fenced() {
	for _, h := range l {
		if x, ok := h.(HookFenced); ok {
			x.OnFenced()
		}
	}
}

func (l hookList) DeadTransactionFenced() {
	for _, h := range l {
		if x, ok := h.(HookDeadTransactionFenced); ok {
			x.OnDeadTransactionFenced()
		}
	}
}

func (l hookList) StuckTransactionFenced() {
	for _, h := range l {
		if x, ok := h.(HookStuckTransactionFenced); ok {
			x.OnStuckTransactionFenced()
		}
	}
}

func (l hookList) PeersWatched(n int) {
	for _, h := range l {
		if x, ok := h.(HookPeersWatched); ok {
			x.OnPeersWatched(n)
		}
	}
}

func (l hookList) InstanceDied(fenced int) {
	for _, h := range l {
		if x, ok := h.(HookInstanceDied); ok {
			x.OnInstanceDied(fenced)
		}
	}
}

func (l hookList) Rebalanced() {
	for _, h := range l {
		if x, ok := h.(HookRebalanced); ok {
			x.OnRebalanced()
		}
	}
}

func (l hookList) RebalanceCompleted(took time.Duration) {
	for _, h := range l {
		if x, ok := h.(HookRebalanceCompleted); ok {
			x.OnRebalanceCompleted(took)
		}
	}
}

func (l hookList) ConsumerLag(topic string, partition int32, records int64) {
	for _, h := range l {
		if x, ok := h.(HookConsumerLag); ok {
			x.OnConsumerLag(topic, partition, records)
		}
	}
}

func (l hookList) TableOpened(partition int32, kept bool) {
	for _, h := range l {
		if x, ok := h.(HookTableOpened); ok {
			x.OnTableOpened(partition, kept)
		}
	}
}

func (l hookList) RestoreProgress(partition int32, restored, remaining int64) {
	for _, h := range l {
		if x, ok := h.(HookRestoreProgress); ok {
			x.OnRestoreProgress(partition, restored, remaining)
		}
	}
}

func (l hookList) TableSize(partition int32, entries int64) {
	for _, h := range l {
		if x, ok := h.(HookTableSize); ok {
			x.OnTableSize(partition, entries)
		}
	}
}

func (l hookList) KeyFilterBytes(partition int32, bytes int) {
	for _, h := range l {
		if x, ok := h.(HookKeyFilterBytes); ok {
			x.OnKeyFilterBytes(partition, bytes)
		}
	}
}

func (l hookList) Swept(partition int32, deleted int) {
	for _, h := range l {
		if x, ok := h.(HookSwept); ok {
			x.OnSwept(partition, deleted)
		}
	}
}

func (l hookList) PartitionRevoked(partition int32) {
	for _, h := range l {
		if x, ok := h.(HookPartitionRevoked); ok {
			x.OnPartitionRevoked(partition)
		}
	}
}

func (l hookList) StandbyLag(partition int32, records int64) {
	for _, h := range l {
		if x, ok := h.(HookStandbyLag); ok {
			x.OnStandbyLag(partition, records)
		}
	}
}

func (l hookList) CallStarted() {
	for _, h := range l {
		if x, ok := h.(HookCallStarted); ok {
			x.OnCallStarted()
		}
	}
}

func (l hookList) CallEnded(took time.Duration) {
	for _, h := range l {
		if x, ok := h.(HookCallEnded); ok {
			x.OnCallEnded(took)
		}
	}
}

func (l hookList) KeyWaited(took time.Duration) {
	for _, h := range l {
		if x, ok := h.(HookKeyWaited); ok {
			x.OnKeyWaited(took)
		}
	}
}
