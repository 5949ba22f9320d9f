// Package bench is the benchmark of docs/benchmarks.md: this worker's exactly-once and
// best-effort (goka) runtimes next to a raw pipe, the Redis SET NX pattern and a
// PostgreSQL processed_messages table, on one broker in one run.
//
// The harness is in bench/harness, the contenders in bench/contenders, the
// command in bench/cmd/bench (`make bench`, `make bench-smoke`); the results
// are in docs/benchmarks.md. This package holds only the smoke test, which
// `make test` runs against its broker.
package bench
