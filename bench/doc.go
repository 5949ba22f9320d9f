// Package bench is the benchmark of docs/benchmarks.md: this worker's exactly-once and
// best-effort (goka) runtimes next to a raw pipe, the Redis SET NX pattern, a
// PostgreSQL processed_messages table and the same job as a Kafka Streams
// application, on one broker in one run.
//
// The harness is in bench/harness, the contenders in bench/contenders (the Kafka
// Streams application, a Maven project, in bench/kstreams), the
// command in bench/cmd/bench (`make bench`, `make bench-smoke`); the results
// are in docs/benchmarks.md. This package holds only the smoke test, which
// `make test` runs against its broker.
//
// bench is a Go module of its own so that the clients it compares against
// (Redis, PostgreSQL) and its chart library are not requirements of the
// worker's module, which library users import. Its go.mod replaces the
// worker's module with ../: the benchmark always measures this checkout. It
// still imports the worker's internal packages, which Go allows by import
// path (github.com/dedupkit/dedup/bench is under github.com/dedupkit/dedup),
// whichever module the importer is in.
package bench
