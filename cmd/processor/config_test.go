package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedupkit/dedup/internal/checks"
	"github.com/dedupkit/dedup/processor"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

var required = []string{"--brokers", "127.0.0.1:9092", "--group", "g", "--input", "in", "--output", "out"}

func TestParseConfigDefaultsAndEnv(t *testing.T) {
	cfg, err := parseConfig("t", required, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DLQ != "g-dlq" || cfg.KeyType != "event-id" || cfg.Retention != 7*24*time.Hour ||
		cfg.CommitInterval != 100*time.Millisecond || cfg.Guarantee != ExactlyOnce || cfg.Threads != 1 || cfg.IDField != "eventId" {
		t.Fatalf("defaults: %+v", cfg)
	}

	env := envMap(map[string]string{
		"PROCESSOR_BROKERS": "a:1, b:2", "PROCESSOR_GROUP": "env-group", "PROCESSOR_INPUT": "i",
		"PROCESSOR_OUTPUT": "o", "PROCESSOR_RETENTION": "1h", "PROCESSOR_ID_HEADER": "ce_id",
	})
	cfg, err = parseConfig("t", []string{"--group", "flag-group"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Brokers, ",") != "a:1,b:2" || cfg.Group != "flag-group" || cfg.Retention != time.Hour {
		t.Fatalf("env or precedence wrong: %+v", cfg)
	}
	if cfg.ReadyAbortLimit != 5 || cfg.ReadyStallAfter != 0 || cfg.LiveStallAfter != 0 { // 0: checks.StallBounds
		t.Fatalf("health defaults: %d %v %v", cfg.ReadyAbortLimit, cfg.ReadyStallAfter, cfg.LiveStallAfter)
	}
	if cfg.IDSourceHeader != "ce_source" {
		t.Fatalf("--id-header=ce_id should default --id-source-header to ce_source, got %q", cfg.IDSourceHeader)
	}
}

// --input takes several topics, from the flag or the environment, the
// flag winning; Topology reads them all.
func TestParseConfigInputs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"one", required, nil, []string{"in"}},
		{"a list", append(required, "--input", "orders, orders-retry"), nil, []string{"orders", "orders-retry"}},
		{"from the environment", []string{"--brokers", "a:1", "--group", "g", "--output", "o"},
			map[string]string{"PROCESSOR_INPUT": "eu.orders,us.orders"}, []string{"eu.orders", "us.orders"}},
		{"the flag wins", required, map[string]string{"PROCESSOR_INPUT": "eu.orders,us.orders"}, []string{"in"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig("t", tc.args, envMap(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.Inputs, tc.want) {
				t.Fatalf("inputs %q, want %q", cfg.Inputs, tc.want)
			}
			top, err := cfg.Topology()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(top.Inputs, tc.want) {
				t.Fatalf("topology inputs %q, want %q", top.Inputs, tc.want)
			}
		})
	}
}

func TestParseConfigNamesTheBadFlag(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no brokers", []string{"--group", "g", "--input", "i", "--output", "o"}, nil, "--brokers: required"},
		{"broker without port", append([]string{}, append(required, "--brokers", "localhost")...), nil, `--brokers: "localhost" has no port`},
		{"bad key type", append(required, "--key-type", "offset"), nil, "--key-type:"},
		{"zero retention", append(required, "--retention", "0s"), nil, "--retention:"},
		{"unknown guarantee", append(required, "--guarantee", "maybe"), nil, "--guarantee:"},
		{"zero threads", append(required, "--threads", "0"), nil, "--threads:"},
		{"threads with best-effort", append(required, "--threads", "2", "--guarantee", "best-effort"), nil, "--threads: only exactly-once"},
		{"session timeout with best-effort", append(required, "--session-timeout", "3s", "--guarantee", "best-effort"), nil, "--session-timeout: 3s: exactly-once only"},
		{"zero commit interval", append(required, "--commit-interval", "0s"), nil, "--commit-interval:"},
		{"fence stuck within a live transaction", append(required, "--fence-stuck-after", "100ms"), nil,
			"--fence-stuck-after: 100ms: must exceed --commit-interval (100ms)"},
		{"fence stuck within a longer commit interval", append(required, "--fence-stuck-after", "2s", "--commit-interval", "3s"), nil,
			"--fence-stuck-after: 2s: must exceed --commit-interval (3s)"},
		{"negative fence stuck", append(required, "--fence-stuck-after", "-1s"), nil, "--fence-stuck-after: -1s must not be negative"},
		{"peer address without a port", append(required, "--peer-addr", "10.0.0.1"), withPeerSecret, "--peer-addr: peer address \"10.0.0.1\": want host:port"},
		{"peer advertise without a host", append(required, "--peer-advertise", ":7000"), withPeerSecret, "--peer-advertise: peer advertise address \":7000\": want host:port"},
		{"peer advertise without listening", append(required, "--peer-addr", "", "--peer-advertise", "w1:7000"), withPeerSecret, "--peer-addr: peer advertise address \"w1:7000\" without a peer address"},
		{"peer address with best-effort", append(required, "--peer-addr", ":7000", "--guarantee", "best-effort"), nil, "--peer-addr: exactly-once only"},
		{"fence stuck with best-effort", append(required, "--fence-stuck-after", "3s", "--guarantee", "best-effort"), nil, "--fence-stuck-after: 3s: exactly-once only"},
		{"unknown handler", append(required, "--handler", "nope"), nil, "--handler:"},
		{"bad instance id", append(required, "--instance-id", "pod/0"), nil, `--instance-id: instance ID "pod/0"`},
		{"bad instance id from env", required, map[string]string{"PROCESSOR_INSTANCE_ID": "a b"}, `--instance-id: instance ID "a b"`},
		{"instance id with best-effort", append(required, "--instance-id", "dedup-0", "--guarantee", "best-effort"), nil, "--instance-id: exactly-once only"},
		{"output is input", []string{"--brokers", "a:1", "--group", "g", "--input", "x", "--output", "x"}, nil, "--input:"},
		{"output is table", []string{"--brokers", "a:1", "--group", "g", "--input", "x", "--output", "g-table"}, nil, "--output:"},
		{"output among the inputs", []string{"--brokers", "a:1", "--group", "g", "--input", "x,y", "--output", "y"}, nil,
			`--input: "y" is also the output`},
		{"dead-letter topic among the inputs", append(required, "--input", "x,g-dlq"), nil, `--input: "g-dlq" is also the output or dead-letter topic`},
		{"empty input element", append(required, "--input", "x,,y"), nil, `--input: "x,,y" names an empty topic`},
		{"trailing comma", append(required, "--input", "x,"), nil, `--input: "x," names an empty topic`},
		{"empty input from env", []string{"--brokers", "a:1", "--group", "g", "--output", "o"}, map[string]string{"PROCESSOR_INPUT": "x, ,y"},
			`--input: "x,,y" names an empty topic`},
		{"input named twice", append(required, "--input", "x, y,x"), nil, `--input: "x" is named twice`},
		{"input is the loop topic", append(required, "--input", "x,g-loop"), nil, `--input: "g-loop" is the group's own table or loop topic`},
		{"only commas", []string{"--brokers", "a:1", "--group", "g", "--input", " ", "--output", "o"}, nil, "--input: required"},
		{"bad replication", append(required, "--replication-factor", "0"), nil, "--replication-factor:"},
		{"bad env duration", required, map[string]string{"PROCESSOR_RETENTION": "forever"}, "PROCESSOR_RETENTION (for --retention)"},
		{"bad stale policy", append(required, "--stale-events", "drop"), nil, "--stale-events:"},
		{"bad rekey policy", append(required, "--rekey", "sometimes"), nil, "--rekey:"},
		{"rekey never best-effort", append(required, "--rekey", "never", "--guarantee", "best-effort"), nil, "--rekey: never needs --guarantee=exactly-once"},
		{"leave group with best-effort", append(required, "--guarantee", "best-effort", "--leave-group-on-stop"), nil,
			"--leave-group-on-stop: exactly-once only"},
		{"bad leave group from env", required, map[string]string{"PROCESSOR_LEAVE_GROUP_ON_STOP": "sometimes"},
			"PROCESSOR_LEAVE_GROUP_ON_STOP (for --leave-group-on-stop)"},
		{"zero sweep interval", append(required, "--sweep-interval", "0s"), nil, "--sweep-interval:"},
		{"sweep interval with best-effort", append(required, "--sweep-interval", "5m", "--guarantee", "best-effort"), nil, "--sweep-interval: 5m0s: exactly-once only"},
		{"TLS file without --tls", append(required, "--tls-ca-file", "/etc/ssl/ca.pem"), nil, "--tls-ca-file: set without --tls"},
		{"missing CA file", append(required, "--tls", "--tls-ca-file", "/nonexistent/ca.pem"), nil, "--tls-ca-file: open /nonexistent/ca.pem"},
		{"client certificate without key", append(required, "--tls", "--tls-cert-file", "/etc/c.pem"), nil, "--tls-key-file: required with --tls-cert-file"},
		{"unknown SASL mechanism", append(required, "--sasl-mechanism", "OAUTHBEARER", "--sasl-user", "u", "--sasl-password", "p"), nil, `--sasl-mechanism: "OAUTHBEARER" is not`},
		{"SASL without password", append(required, "--sasl-mechanism", "scram-sha-512", "--sasl-user", "u"), nil, "--sasl-password: required with --sasl-mechanism=SCRAM-SHA-512"},
		{"SASL user without mechanism", required, map[string]string{"PROCESSOR_SASL_USER": "u", "PROCESSOR_SASL_PASSWORD": "p"}, "--sasl-mechanism: required with --sasl-user"},
		{"memory limit ratio above 1", append(required, "--memory-limit-ratio", "1.5"), nil, "--memory-limit-ratio: 1.5: want 0 (off) to 1"},
		{"negative memory limit ratio", required, map[string]string{"PROCESSOR_MEMORY_LIMIT_RATIO": "-0.1"}, "--memory-limit-ratio: -0.1"},
		{"NaN memory limit ratio", append(required, "--memory-limit-ratio", "NaN"), nil, "--memory-limit-ratio: NaN"},
		{"bad log level", append(required, "--log-level", "loud"), nil, "--log-level:"},
		{"zero abort limit", append(required, "--ready-abort-limit", "0"), nil, "--ready-abort-limit: 0: at least 1"},
		{"ready stall within the transaction timeout", append(required, "--ready-stall-after", "10s"), nil,
			"--ready-stall-after: 10s: must exceed --commit-interval and the transaction timeout (10s)"},
		{"ready stall within the commit interval", append(required, "--ready-stall-after", "20s", "--commit-interval", "30s"), nil,
			"--ready-stall-after: 20s: must exceed --commit-interval and the transaction timeout (30s)"},
		{"negative stall bound", append(required, "--live-stall-after", "-1s"), nil, "--ready-stall-after: 0s, --live-stall-after -1s: must not be negative"},
		{"live stall within the ready stall", required, map[string]string{"PROCESSOR_LIVE_STALL_AFTER": "30s"}, "--live-stall-after: 30s: must exceed --ready-stall-after (30s)"},
		{"health bound with best-effort", append(required, "--guarantee", "best-effort", "--live-stall-after", "10m"), nil,
			"--live-stall-after: 10m0s: exactly-once only"},
		{"stray argument", append(required, "extra"), nil, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig("t", tt.args, envMap(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// --leave-group-on-stop is off unless the flag or the environment sets it;
// the command line wins over the environment.
func TestParseConfigLeaveGroupOnStop(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{"default", nil, nil, false},
		{"flag", []string{"--leave-group-on-stop"}, nil, true},
		{"env", nil, map[string]string{"PROCESSOR_LEAVE_GROUP_ON_STOP": "true"}, true},
		{"flag wins over env", []string{"--leave-group-on-stop=false"}, map[string]string{"PROCESSOR_LEAVE_GROUP_ON_STOP": "true"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseConfig("t", append(slices.Clone(required), tt.args...), envMap(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.LeaveGroup != tt.want {
				t.Fatalf("LeaveGroup = %v, want %v", cfg.LeaveGroup, tt.want)
			}
		})
	}
}

// The password can come from the environment, off the command line (ps
// shows the command line to every user of the machine).
func TestParseConfigSASLFromTheEnvironment(t *testing.T) {
	cfg, err := parseConfig("t", append(required, "--tls", "--sasl-mechanism", "PLAIN"),
		envMap(map[string]string{"PROCESSOR_SASL_USER": "svc", "PROCESSOR_SASL_PASSWORD": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Security; !s.TLS.Enable || s.SASL.Mechanism != "PLAIN" || s.SASL.User != "svc" || s.SASL.Password != "s3cret" {
		t.Fatalf("security config %+v", s)
	}
}

// Best-effort accepts the session timeout goka runs with, however given.
func TestParseConfigBestEffortTakesTheDefaultSessionTimeout(t *testing.T) {
	for _, args := range [][]string{
		append(required, "--guarantee", "best-effort"),
		append(required, "--guarantee", "best-effort", "--session-timeout", "10s"),
	} {
		if _, err := parseConfig("t", args, envMap(nil)); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// --guarantee takes the two names of what the runtimes give, from the flag
// or the environment, and refuses any other.
func TestParseConfigGuarantee(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string // the parsed guarantee, when wantErr is empty
		wantErr string
	}{
		{"default", required, nil, ExactlyOnce, ""},
		{"exactly-once", append(required, "--guarantee", "exactly-once"), nil, ExactlyOnce, ""},
		{"best-effort", append(required, "--guarantee", "best-effort"), nil, BestEffort, ""},
		{"best-effort from the environment", required, map[string]string{"PROCESSOR_GUARANTEE": "best-effort"}, BestEffort, ""},
		{"unknown from the environment", required, map[string]string{"PROCESSOR_GUARANTEE": "at-most-once"}, "", `--guarantee: "at-most-once" is not exactly-once or best-effort`},
		{"unknown", append(required, "--guarantee", "at-most-once"), nil, "", `--guarantee: "at-most-once" is not exactly-once or best-effort`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseConfig("t", tt.args, envMap(tt.env))
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case cfg.Guarantee != tt.want:
				t.Fatalf("guarantee %q, want %q", cfg.Guarantee, tt.want)
			}
		})
	}
}

// The stall bounds' defaults follow a long commit interval; given ones are
// checked against it.
func TestParseConfigStallBoundsFollowTheCommitInterval(t *testing.T) {
	for _, args := range [][]string{
		append(required, "--commit-interval", "30s"),
		append(required, "--commit-interval", "2m"),
		append(required, "--live-stall-after", "1m"),
	} {
		if _, err := parseConfig("t", args, envMap(nil)); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	for _, tt := range []struct {
		interval, ready, live time.Duration
		wantReady, wantLive   time.Duration
	}{
		{100 * time.Millisecond, 0, 0, 30 * time.Second, 5 * time.Minute},
		{30 * time.Second, 0, 0, 40 * time.Second, 5 * time.Minute},
		{5 * time.Minute, 0, 0, 5*time.Minute + 10*time.Second, 10*time.Minute + 20*time.Second},
		{time.Second, 20 * time.Second, 0, 20 * time.Second, 5 * time.Minute},
		{time.Second, 0, time.Minute, 30 * time.Second, time.Minute},
	} {
		ready, live := checks.StallBounds(tt.interval, processor.DefaultTransactionTimeout, tt.ready, tt.live)
		if ready != tt.wantReady || live != tt.wantLive {
			t.Errorf("StallBounds(%v, 10s, %v, %v) = %v, %v; want %v, %v", tt.interval, tt.ready, tt.live, ready, live, tt.wantReady, tt.wantLive)
		}
	}
}
