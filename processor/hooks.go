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
// Config.Transactions.FenceStuckAfter and held the member's partitions.
type HookStuckTransactionFenced interface{ OnStuckTransactionFenced() }

// HookPeersWatched is told how many other instances of the group this one
// holds a liveness connection to (Config.Peers.Addr), at every change.
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

// tell calls event on every hook of l that implements H.
func tell[H any](l hookList, event func(H)) {
	for _, h := range l {
		if x, ok := h.(H); ok {
			event(x)
		}
	}
}

func (l hookList) TxnCommitted(took time.Duration, records int) {
	tell(l, func(h HookTxnCommitted) { h.OnTxnCommitted(took, records) })
}

func (l hookList) TxnAborted(reason string) {
	tell(l, func(h HookTxnAborted) { h.OnTxnAborted(reason) })
}

func (l hookList) CommitStalled() { tell(l, func(h HookCommitStalled) { h.OnCommitStalled() }) }

func (l hookList) Fenced() { tell(l, func(h HookFenced) { h.OnFenced() }) }

func (l hookList) DeadTransactionFenced() {
	tell(l, func(h HookDeadTransactionFenced) { h.OnDeadTransactionFenced() })
}

func (l hookList) StuckTransactionFenced() {
	tell(l, func(h HookStuckTransactionFenced) { h.OnStuckTransactionFenced() })
}

func (l hookList) PeersWatched(n int) { tell(l, func(h HookPeersWatched) { h.OnPeersWatched(n) }) }

func (l hookList) InstanceDied(fenced int) {
	tell(l, func(h HookInstanceDied) { h.OnInstanceDied(fenced) })
}

func (l hookList) Rebalanced() { tell(l, func(h HookRebalanced) { h.OnRebalanced() }) }

func (l hookList) RebalanceCompleted(took time.Duration) {
	tell(l, func(h HookRebalanceCompleted) { h.OnRebalanceCompleted(took) })
}

func (l hookList) ConsumerLag(topic string, partition int32, records int64) {
	tell(l, func(h HookConsumerLag) { h.OnConsumerLag(topic, partition, records) })
}

func (l hookList) TableOpened(partition int32, kept bool) {
	tell(l, func(h HookTableOpened) { h.OnTableOpened(partition, kept) })
}

func (l hookList) RestoreProgress(partition int32, restored, remaining int64) {
	tell(l, func(h HookRestoreProgress) { h.OnRestoreProgress(partition, restored, remaining) })
}

func (l hookList) TableSize(partition int32, entries int64) {
	tell(l, func(h HookTableSize) { h.OnTableSize(partition, entries) })
}

func (l hookList) KeyFilterBytes(partition int32, bytes int) {
	tell(l, func(h HookKeyFilterBytes) { h.OnKeyFilterBytes(partition, bytes) })
}

func (l hookList) Swept(partition int32, deleted int) {
	tell(l, func(h HookSwept) { h.OnSwept(partition, deleted) })
}

func (l hookList) PartitionRevoked(partition int32) {
	tell(l, func(h HookPartitionRevoked) { h.OnPartitionRevoked(partition) })
}

func (l hookList) StandbyLag(partition int32, records int64) {
	tell(l, func(h HookStandbyLag) { h.OnStandbyLag(partition, records) })
}

func (l hookList) CallStarted() { tell(l, func(h HookCallStarted) { h.OnCallStarted() }) }

func (l hookList) CallEnded(took time.Duration) {
	tell(l, func(h HookCallEnded) { h.OnCallEnded(took) })
}

func (l hookList) KeyWaited(took time.Duration) {
	tell(l, func(h HookKeyWaited) { h.OnKeyWaited(took) })
}
