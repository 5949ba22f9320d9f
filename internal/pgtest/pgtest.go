// Package pgtest gives tests the PostgreSQL server `make test` starts
// (integration/postgres/postgres.sh).
package pgtest

import (
	"os"
	"testing"

	"github.com/dedupkit/dedup/internal/kafkatest"
)

// DSNEnv names the variable with the server's connection string.
const DSNEnv = "DEDUP_POSTGRES_DSN"

// DSN is the connection string in DEDUP_POSTGRES_DSN; a test without it is
// missing its server (kafkatest.Missing: a failure under CI=true).
func DSN(t testing.TB) string {
	t.Helper()
	v := os.Getenv(DSNEnv)
	if v == "" {
		kafkatest.Missing(t, "%s is not set; `make test` starts PostgreSQL and sets it (integration/postgres/postgres.sh)", DSNEnv)
	}
	return v
}
