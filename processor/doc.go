// Package processor is the exactly-once runtime: it runs a dedup.Topology so
// that an event's outputs, its dead letter, its seen mark in the group table
// and its input offset are committed together in one Kafka transaction, or
// not at all (Kafka Streams' exactly_once_v2, KIP-447).
//
//	p, err := processor.New(ctx, processor.Config{
//		Brokers:    []string{"kafka-1:9092"},
//		StateDir:   "/var/lib/settlement",
//		Registerer: prometheus.DefaultRegisterer,
//	}, topology)
//	if err != nil { ... }
//	go http.ListenAndServe(":8080", p.HTTPHandler()) // /metrics, /healthz, /readyz, /v1/seen/{id}
//	return p.Run(ctx)                                // until ctx ends: then it commits and closes
//
// New checks the cluster and the topology, creates the group's topics when
// they are missing (the outputs, the dead-letter topic, the table's
// compacted changelog "<group>-table" and the re-key topic "<group>-loop")
// and refuses at once what cannot work. Instances of one group share the
// work by partitions; each keeps the tables of its partitions in LevelDB
// under Config.StateDir, rebuilt from the changelog when a partition moves
// or the state is lost. A killed instance loses nothing and doubles
// nothing: its open transaction is aborted, and the partitions' next owner
// goes on from the last commit, skipping what the table holds.
//
// Config.Registerer turns on the Prometheus metrics, and Config.Hooks tells
// the runtime's events to code of your own (see Hook). Run returns
// ErrInstanceFenced when another instance took this one's InstanceID.
// docs/library.md is the guide, docs/architecture.md the protocol.
package processor

// How the runtime works, for a maintainer: the protocol top-down, with the
// code to read at each step.
//
// # Start (processor.go, instance.go)
//
// New checks the topology, creates or checks the group's topics (the table's
// compacted changelog <group>-table and the re-key topic <group>-loop are
// copartitioned with the inputs) and reads the largest record every written
// topic takes (recordLimit). Each consumer-group member ("thread") gets a
// transactional producer whose transactional.id, <group>-<instance id>-<n>,
// is the same across restarts of the instance: the instance ID is the
// configured one or the one persisted in the state dir. That stable ID is
// what fences a zombie: a new producer with the same transactional.id bumps
// the epoch, aborts the old one's open transaction and makes its later
// writes fail with PRODUCER_FENCED. The same ID is the static group member
// ID, so a restart on the same identity gets its partitions back without a
// rebalance.
//
// A member (member.go) is four parts, one per responsibility: its claim
// side (sessionState: the group session, the restores, the loop's channels
// and calls; session.go, restore.go, calls.go), its table set (tableSet:
// the restored partitions' stores), its write side (transaction: the
// transactional producer, the open transaction and the one committing;
// txn.go, commit.go), and the Processor's background work it takes part in
// (background: kept stores, key filter scans, standbys, and the watches that
// abort a dead instance's transactions; standby.go, scanpace.go, stuck.go,
// peerwatch.go).
//
// # Assignment (internal/assign)
//
// The members join with a copartitioned, sticky strategy: a member gets the
// same partitions of every input and the loop topic, so one table store per
// partition serves them, and across a rebalance it keeps the partitions it
// had, up to its share, because every partition that moves costs its new
// owner a restore. With standby replicas and re-keying, a member warming a
// table up gets that partition's inputs first and forwards what the table
// judges to the member that still holds it (engine.ErrTableElsewhere).
//
// # Restore (session.go, restore.go, store.go)
//
// sarama's eager protocol revokes every partition at each rebalance, but a
// member keeps its stores open through it: Cleanup keeps them once the loop
// stopped (nothing uncommitted is in them), and Setup closes only those of
// partitions it did not get. Setup starts one restore per claimed partition,
// a few at once, and returns. A restore takes the kept store, or opens the
// partition's LevelDB store (its key filter is built by a scan of every
// stored key, in the background once the member's partitions process again,
// one store at a time: scanpace.go, resume.go), and reads the changelog read_committed
// from the offset the store recorded up to the log end: for a kept store
// that is nothing, or what another member committed while this one was cut
// off. A store whose recorded offset is outside the log is wiped and
// restored from the start; a damaged store is deleted and restored
// (store_corrupt.go). A restored table is handed to the loop, and only then
// do the partition's claims hand it records: nothing is judged against a
// partial table, no offset of a partition still restoring is committed, and
// the other partitions process meanwhile. A failed restore ends the session
// (a disk error stops the member).
//
// The read waits for an open transaction below the log end to be decided.
// One left open by an instance that died is aborted by the group's leader
// before it hands out the dead instance's partitions (see Abort and
// fencing); without that (brokers before Kafka 3.0, or the fencing failed)
// the coordinator aborts it once it is older than Transactions.Timeout, at its
// next check for such transactions (the broker's
// transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by
// default). An instance restarted under the same instance ID aborts its
// predecessor's transaction at once.
//
// # Standby replicas (standby.go, internal/assign)
//
// With Config.Group.StandbyReplicas, the leader's plan also gives members
// standbys: partitions of other instances whose changelog they tail into a
// store of their own, read_committed up to the last stable offset. Setup
// reconciles a member's standbys with its assignment (a store it loses as
// an owner becomes its standby's without a close), and a restore takes the
// store of a standby whose partition the member now owns, so it reads only
// the tail. A member told to warm partitions up (it joined, and they move
// to it) rejoins once they have caught up, and the leader moves them then.
//
// # Processing (member.go ConsumeClaim, loop, process; context.go)
//
// Each claim's goroutine decodes its records ahead (engine.Prepare) and hands
// them in batches to the member's one loop goroutine, which owns the stores,
// the open transaction and the offsets. For each record the loop runs the
// topology's engine (engine.ProcessRecord) with a txnContext as its
// engine.Runtime: table reads go to the store's in-memory overlay over
// LevelDB, table writes go to the overlay and to the changelog
// (queueChangelog), outputs, dead letters and loop records are streamed into
// the open transaction (txn.go send). Nothing of it is visible to
// read_committed consumers, and nothing is in LevelDB, before the commit. An
// error the engine returns aborts the transaction; one that is not the
// handler's interruption (a table partition that cannot be read or decoded)
// also stops the member, as it would fail again on every retry.
//
// # Commit (commit.go, store_seal.go, commit_watch.go)
//
// Every commit interval, or when a transaction holds Transactions.MaxBatch records, the
// loop seals the overlays and starts the commit in a goroutine: wait for the
// produce acknowledgements, AddOffsetsToTxn with the live session's group
// metadata (so a fenced member's offsets are refused as well), EndTxn. Only then
// are the sealed overlays written to LevelDB, with the changelog offset each
// reached; the loop goes on processing meanwhile, holding what it produces
// back (transaction.staged) until the commit returned. A crash at any point
// leaves either the whole transaction or none of it: the next owner restores
// the table from the changelog and resumes at the committed offsets.
//
// # Abort and fencing (txn.go abort, member.go run, abort.go)
//
// A failed produce or commit aborts the transaction: the overlays are
// dropped, the session ends and the member rejoins, resuming at the committed
// offsets. A producer in a fatal state is replaced. Fencing errors
// (PRODUCER_FENCED, a stale generation, a fenced static member) mean another
// member or instance owns the work now; a second live instance with this
// instance's ID stops it with ErrInstanceFenced. A refusal by an ACL stops
// the member with the broker's error, since a retry would fail the same way.
// A record the broker refuses as too large makes the member read the limits
// again, so the event is dead-lettered when it comes again.
//
// A member that died with a transaction open (kill -9) would hold its
// partitions' next owner back until the broker expires that transaction
// (transaction timeout plus the broker's check interval): the next owner can
// read neither the committed offsets nor the changelog past it. So the
// group's leader, before it hands out an assignment, aborts the open
// transactions of the group's transactional IDs whose member is no longer in
// the group, by an InitProducerId on each (fence.go). A takeover after a
// kill -9 then waits the session timeout, a heartbeat interval (at most
// 0.25 s) for the members to rejoin, and those round trips.
//
// Under re-keying such a transaction also holds the loop partitions of live
// members, which cannot wait for a session timeout; so two watches abort
// sooner: the stuck watch (stuck.go), another instance's transaction that
// stays open past Config.Transactions.FenceStuckAfter while records wait behind it, and
// the peer watch (peers.go, peerwatch.go), every transaction of an instance
// whose process is seen gone. The plan and the watches only choose the
// transactional IDs; the Processor's one aborter (abort.go) lists the
// group's open transactions for them and fences the chosen ones, so each
// abort is retried, counted and logged the same way.
//
// # Stop (processor.go Run, leave.go)
//
// A cancelled context ends each member's session: its last transaction
// commits, then the consumer groups and clients close. sarama sends no
// LeaveGroup for a static member, so the coordinator keeps the members
// until the session timeout, which serves a restart. A stop for good
// (Config.Group.LeaveOnStop, Processor.LeaveGroupOnStop) then removes all
// of the instance's members in one LeaveGroup request by group instance
// ID (KIP-345); only a clean stop does, and a failure is logged.
//
// # Health and housekeeping (health.go, http.go, sweep.go)
//
// The member reports consecutive aborts and how long consumed records have
// waited for their commit; readiness and liveness turn false past configured
// bounds. The sweeper deletes expired seen records in the open transaction,
// with tombstones in the changelog, so compaction removes them and a restore
// never brings them back (a record is judged expired before it is swept).
// The worker binary's start also warns when an input keeps records longer
// than the table remembers them (internal/retention).
