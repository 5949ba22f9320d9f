package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/pgtest"
)

func TestConfig(t *testing.T) {
	env := func(dsn string) func(string) string {
		return func(k string) string {
			if k == dsnEnv {
				return dsn
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		dsn  string
		want string // in the error; "" for none
	}{
		{"complete", []string{"--brokers", "k:9092", "--state-dir", "/s"}, "postgres://db", ""},
		{"no brokers", []string{"--state-dir", "/s"}, "postgres://db", "--brokers: required"},
		{"no state dir", []string{"--brokers", "k:9092"}, "postgres://db", "--state-dir: required"},
		{"no database", []string{"--brokers", "k:9092", "--state-dir", "/s"}, "", dsnEnv + ": required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(tc.args, env(tc.dsn))
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestLedger runs the service on a real broker and database: payments with
// copies debit each account once and yield one settlement each.
func TestLedger(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	dsn := pgtest.DSN(t)
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	input, output, group := "ledger-in-"+suffix, "ledger-out-"+suffix, "ledger-"+suffix
	if err := kafkatest.CreateTopic(brokers, input, 3); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kafkatest.DeleteTopics(brokers, input, output, group+"-table", group+"-loop", group+"-dlq") })
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The service's tables are shared with other runs on this server: the
	// accounts of this run are its own.
	acct := func(i int) string { return fmt.Sprintf("acct-%s-%d", suffix, i) }
	ev := func(id string, account int, amount int64) kafkatest.Record {
		return kafkatest.Record{Key: acct(account), Value: fmt.Appendf(nil,
			`{"eventId":%q,"type":"PaymentRequested","payload":{"account":%q,"amount":%d}}`, id+suffix, acct(account), amount)}
	}
	recs := []kafkatest.Record{ev("p1", 1, 100), ev("p2", 2, 30), ev("p1", 1, 100), ev("p3", 1, 5), ev("p2", 2, 30),
		{Key: acct(3), Value: []byte(`{"eventId":"bad` + suffix + `","type":"PaymentRequested","payload":{"account":"","amount":1}}`)}}
	if _, err := kafkatest.Produce(brokers, input, recs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	cfg, err := parseConfig([]string{"--brokers", strings.Join(brokers, ","), "--state-dir", t.TempDir(),
		"--group", group, "--input", input, "--output", output}, func(string) string { return dsn })
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- run(runCtx, cfg) }()
	if err := kafkatest.WaitCommitted(ctx, brokers, group, input); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for account, want := range map[int]int64{1: -105, 2: -30} {
		var balance int64
		if err := db.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = $1", acct(account)).Scan(&balance); err != nil {
			t.Fatal(err)
		}
		if balance != want {
			t.Errorf("%s: balance %d, want %d", acct(account), balance, want)
		}
	}
	var debits int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM debits WHERE account LIKE $1", "acct-"+suffix+"-%").Scan(&debits); err != nil {
		t.Fatal(err)
	}
	if debits != 3 {
		t.Errorf("%d debit rows, want 3", debits)
	}
	out, err := kafkatest.ReadAll(ctx, brokers, output)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range out {
		var s struct{ EventID string }
		json.Unmarshal(r.Value, &s)
		ids = append(ids, strings.TrimSuffix(s.EventID, suffix))
	}
	if len(ids) != 3 {
		t.Errorf("settlements for %v, want one each for p1, p2, p3", ids)
	}
	dlq, err := kafkatest.ReadAll(ctx, brokers, group+"-dlq")
	if err != nil {
		t.Fatal(err)
	}
	if len(dlq) != 1 {
		t.Errorf("%d dead letters, want the payment without an account", len(dlq))
	}
}
