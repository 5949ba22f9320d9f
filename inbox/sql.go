package inbox

import (
	"fmt"
	"regexp"
)

// The statements are PostgreSQL's (ON CONFLICT, a data-modifying WITH,
// unnest): any driver of a PostgreSQL-compatible database serves them
// through database/sql.

// tableName is a table name, optionally schema-qualified: it is written
// into the statements, so nothing else is taken.
var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}(\.[a-z_][a-z0-9_]{0,62})?$`)

// statements are the inbox's SQL for one table.
type statements struct {
	ddl, claim, held, outputs, sweep, count string
}

func newStatements(table string) statements {
	return statements{
		ddl: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
  consumer_group   text        NOT NULL,
  dedup_key        text        NOT NULL,
  source_topic     text        NOT NULL,
  source_partition integer     NOT NULL,
  source_offset    bigint      NOT NULL,
  processed_at     timestamptz NOT NULL DEFAULT now(),
  messages         bytea,
  PRIMARY KEY (consumer_group, dedup_key)
);
CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (consumer_group, processed_at);`, table, indexName(table)),
		// claim inserts the event's row unless the statement's snapshot
		// holds one (held: an earlier attempt committed) or another
		// transaction commits one meanwhile (the insert waits for it, and
		// does nothing: a race).
		claim: fmt.Sprintf(`WITH held AS (
  SELECT messages FROM %[1]s WHERE consumer_group = $1 AND dedup_key = $2
), ins AS (
  INSERT INTO %[1]s (consumer_group, dedup_key, source_topic, source_partition, source_offset)
  SELECT $1, $2, $3, $4, $5 WHERE NOT EXISTS (SELECT 1 FROM held)
  ON CONFLICT (consumer_group, dedup_key) DO NOTHING
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM ins), EXISTS (SELECT 1 FROM held), (SELECT messages FROM held)`, table),
		held: fmt.Sprintf(`SELECT messages FROM %s WHERE consumer_group = $1 AND dedup_key = $2`, table),
		// outputs stores the returned messages of the transaction's first
		// processed events, all in one statement just before the commit.
		outputs: fmt.Sprintf(`UPDATE %s AS t SET messages = v.messages
FROM unnest($2::text[], $3::bytea[]) AS v(dedup_key, messages)
WHERE t.consumer_group = $1 AND t.dedup_key = v.dedup_key`, table),
		// sweep deletes a bounded batch of expired rows.
		sweep: fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid IN (
  SELECT ctid FROM %[1]s WHERE consumer_group = $1 AND processed_at < $2 LIMIT $3
)`, table),
		count: fmt.Sprintf(`SELECT count(*) FROM %s WHERE consumer_group = $1`, table),
	}
}

// indexName is the processed_at index's name, in the table's schema.
func indexName(table string) string {
	name := table
	for i := len(table) - 1; i >= 0; i-- {
		if table[i] == '.' {
			name = table[i+1:]
			break
		}
	}
	return name + "_processed_at"
}
