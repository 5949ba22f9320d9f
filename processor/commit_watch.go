package processor

import "time"

// A commit can hang without failing. When this instance cannot reach one
// broker but reaches the others (a partial partition: a firewall rule, a
// route gone on one host), its heartbeats keep its partitions while the
// records it sent to that broker's partitions are never acknowledged, and
// sarama neither fails them nor lets the transaction end: AbortTxn and
// Close wait for in-flight records too. Unwatched, the member would log
// nothing about it while its partitions stand still; the coordinator aborts
// its transaction after the transaction timeout, and only when the broker
// is back does the member learn it was fenced and start over. The watcher
// below does not end such a commit (the
// hung producer cannot be closed), it says so: every transaction timeout
// while one commit runs, a warning naming the step it waits in, and
// dedup_commit_stalls_total for alerts.

// commitStep is where a running commit is.
type commitStep int32

const (
	stepAcks    commitStep = iota // waiting for the records' acknowledgements
	stepOffsets                   // AddOffsetsToTxn
	stepEndTxn                    // EndTxn (commit)
	stepLevelDB                   // writing the committed overlays
)

func (s commitStep) String() string {
	switch s {
	case stepAcks:
		return "waiting for the records' acknowledgements"
	case stepOffsets:
		return "adding the offsets to the transaction"
	case stepEndTxn:
		return "ending the transaction"
	default:
		return "writing the local tables"
	}
}

// watchCommit warns every TransactionTimeout until stop is called; stop
// returns once the watcher has exited.
func (m *member) watchCommit(pc *pendingCommit) (stop func()) {
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(m.cfg.Transactions.Timeout)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				step := commitStep(pc.step.Load())
				m.log.Warn("commit stalled", "waited", time.Since(pc.start).Round(time.Second), "step", step.String(),
					"records", pc.records, "transactionTimeout", m.cfg.Transactions.Timeout,
					"why", "past the transaction timeout the coordinator aborts this transaction; usually a broker "+
						"that this instance cannot reach while it reaches the others. The member is fenced and starts "+
						"over once that broker answers; its partitions wait meanwhile")
				m.hooks.CommitStalled()
			}
		}
	}()
	return func() {
		close(quit)
		<-exited
	}
}

// setStep records the step a running commit is in, for the watcher.
func (pc *pendingCommit) setStep(s commitStep) { pc.step.Store(int32(s)) }
