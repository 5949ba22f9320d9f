package integration

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup/internal/atleastonce"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/metrics"
	"github.com/dedupkit/dedup/processor"
)

// secureListener is a SASL_SSL listener of the KAFKA_BROKERS cluster, from
// the environment: `kafka.sh secure-env` prints these variables and `make
// test` exports them. Against a cluster of your own, set them to a listener
// that verifies with KAFKA_TLS_CA_FILE and accepts KAFKA_SASL_USER with
// PLAIN; the SCRAM cases also need the right to create SCRAM users.
type secureListener struct {
	brokers        []string
	caFile         string
	user, password string
}

func secureEnv(t *testing.T) secureListener {
	t.Helper()
	s := secureListener{caFile: os.Getenv("KAFKA_TLS_CA_FILE"), user: os.Getenv("KAFKA_SASL_USER"),
		password: os.Getenv("KAFKA_SASL_PASSWORD")}
	if b := os.Getenv("KAFKA_SECURE_BROKERS"); b != "" {
		s.brokers = strings.Split(b, ",")
	}
	if len(s.brokers) == 0 || s.caFile == "" || s.user == "" {
		kafkatest.Missing(t, "KAFKA_SECURE_BROKERS, KAFKA_TLS_CA_FILE and KAFKA_SASL_USER are not set; `make test` sets them (kafka.sh secure-env)")
	}
	// Else every case would wait out the worker's start-up retries.
	c, err := net.DialTimeout("tcp", s.brokers[0], 5*time.Second)
	if err != nil {
		t.Fatalf("no listener at KAFKA_SECURE_BROKERS %s (%v): a broker started before kafka.sh had the SECURE "+
			"listener has none; restart it (make kafka-down kafka-up)", s.brokers[0], err)
	}
	c.Close()
	return s
}

// scramUser creates a SCRAM user of its own for the test (deleted at the
// end) through the plaintext brokers the other tests use, and waits until
// the SECURE listener accepts it: like ACLs, credentials reach the broker
// from the metadata log a moment after the controller took them.
func scramUser(t *testing.T, sec secureListener, brokers []string, mech processor.Mechanism) (user, password string) {
	t.Helper()
	m := sarama.SCRAM_MECHANISM_SHA_256
	if mech == processor.SASLSCRAMSHA512 {
		m = sarama.SCRAM_MECHANISM_SHA_512
	}
	user, password = unique("scram"), unique("pw")
	salt := make([]byte, 16)
	rand.Read(salt)
	admin, err := sarama.NewClusterAdmin(brokers, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	res, err := admin.UpsertUserScramCredentials([]sarama.AlterUserScramCredentialsUpsert{
		{Name: user, Mechanism: m, Iterations: 4096, Salt: salt, Password: []byte(password)}})
	if err == nil && len(res) == 1 && res[0].ErrorCode != sarama.ErrNoError {
		err = res[0].ErrorCode
	}
	if err != nil {
		t.Fatalf("create SCRAM user %s: %v", user, err)
	}
	t.Cleanup(func() {
		if admin, err := sarama.NewClusterAdmin(brokers, kafkatest.Config()); err == nil {
			admin.DeleteUserScramCredentials([]sarama.AlterUserScramCredentialsDelete{{Name: user, Mechanism: m}})
			admin.Close()
		}
	})
	sc := kafkatest.Config()
	if err := (processor.Security{TLS: processor.TLS{Enable: true, CAFile: sec.caFile},
		SASL: processor.SASL{Mechanism: mech, User: user, Password: password}}).Apply(sc); err != nil {
		t.Fatal(err)
	}
	sc.Metadata.Retry.Max = 0
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := sarama.NewClient(sec.brokers, sc)
		if err == nil {
			c.Close()
			return user, password
		}
		if !errors.Is(err, sarama.ErrSASLAuthenticationFailed) || time.Now().After(deadline) {
			t.Fatalf("log in as the new SCRAM user %s: %v", user, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the login above
	}
}

// A worker that can reach the cluster only through its SASL_SSL listener
// processes every event exactly once, in both runtimes and with each SASL
// mechanism: every client it opens (topic creation, group members,
// transactional producers, the table's changelog reads and restore) must
// carry the TLS and SASL settings, or it could not connect at all — the
// listener speaks nothing but TLS, and the brokers' metadata on it names
// only SECURE addresses.
func TestWorkerOnATLSAndSASLListener(t *testing.T) {
	sec := secureEnv(t)
	for _, tc := range []struct {
		name      string
		mechanism processor.Mechanism
		eos       bool
	}{
		{"exactly-once, PLAIN", processor.SASLPlain, true},
		{"exactly-once, SCRAM-SHA-512", processor.SASLSCRAMSHA512, true},
		{"best-effort, SCRAM-SHA-256", processor.SASLSCRAMSHA256, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 3)
			group := e.group("secure")
			user, password := sec.user, sec.password // a super user on kafka.sh's brokers
			if tc.mechanism != processor.SASLPlain {
				// A user of its own, allowed workerACLs and nothing else: where
				// the broker has an authorizer, a missing ACL fails the case.
				user, password = scramUser(t, sec, e.brokers, tc.mechanism)
				acls := workerACLs(group, e.input, e.output, tc.eos)
				grant(t, e.brokers, user, acls)
				t.Logf("user %s with the ACLs:%s", user, aclsString(acls))
			}
			secured := processor.Security{TLS: processor.TLS{Enable: true, CAFile: sec.caFile},
				SASL: processor.SASL{Mechanism: tc.mechanism, User: user, Password: password}}

			topo := e.topology(group, &counter{})
			in := events("s", 40)
			e.produce(in...)
			e.produce(in[:10]...) // the same events again: a producer retry
			// The worker gets only the SECURE listener's addresses.
			reg := prometheus.NewRegistry()
			start := func() *worker {
				reg = prometheus.NewRegistry()
				if tc.eos {
					return e.startEOS(topo, processor.Config{Brokers: sec.brokers, StateDir: t.TempDir(), Security: secured, Registerer: reg})
				}
				m := metrics.New(reg, group)
				return e.startBestEffort(topo, atleastonce.Config{Brokers: sec.brokers, Security: secured, StateDir: t.TempDir(),
					TableSize: m.OnTableSize, TableClosed: m.ForgetPartition, ConsumerLag: m.OnConsumerLag})
			}
			// The lag's offsets come over the listener too, with the
			// worker's ACLs.
			caughtUp := func() {
				_, waitLag := lagOf(t, reg, e.input)
				waitLag("the lag of every partition at 0", 30*time.Second, func(sum float64, series int) bool { return series == 3 && sum == 0 })
			}
			w := start()
			e.waitProcessed(group)
			caughtUp()
			w.stop(t)
			e.exactlyOnce(in)

			// A fresh instance restores the table from the changelog (READ
			// on <group>-table): the same events once more are skipped.
			e.produce(in[:10]...)
			w = start()
			e.waitProcessed(group)
			w.stop(t)
			e.exactlyOnce(in)
		})
	}
}

// A wrong password or an untrusted broker certificate is a configuration
// error: the worker must fail to start with the reason, and at once, not
// retry for kafkautil.StartupTimeout as it does for a cluster that is down
// (sarama reports both as "run out of available brokers"). "At once" is
// asserted as no retry logged, not by a clock.
func TestWorkerRefusedByASecuredListenerFailsAtOnce(t *testing.T) {
	sec := secureEnv(t)
	trusted := processor.TLS{Enable: true, CAFile: sec.caFile}
	for _, tc := range []struct {
		name string
		sec  processor.Security
		want string // in the error
	}{
		{"wrong password", processor.Security{TLS: trusted,
			SASL: processor.SASL{Mechanism: processor.SASLPlain, User: sec.user, Password: sec.password + "-wrong"}}, "SASL Authentication failed"},
		{"unknown user with SCRAM", processor.Security{TLS: trusted,
			SASL: processor.SASL{Mechanism: processor.SASLSCRAMSHA256, User: unique("nobody"), Password: "x"}}, "SASL Authentication failed"},
		{"broker certificate from an unknown CA", processor.Security{TLS: processor.TLS{Enable: true}, // the system's roots
			SASL: processor.SASL{Mechanism: processor.SASLPlain, User: sec.user, Password: sec.password}}, "certificate signed by unknown authority"},
		{"certificate not for the name", processor.Security{TLS: processor.TLS{Enable: true, CAFile: sec.caFile, ServerName: "kafka.example.com"},
			SASL: processor.SASL{Mechanism: processor.SASLPlain, User: sec.user, Password: sec.password}}, "not kafka.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			group := e.group("refused")
			for _, runtime := range []string{"exactly-once", "best-effort"} {
				logs := &syncBuffer{}
				topo := e.topology(group, &counter{})
				topo.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
				var err error
				if runtime == "exactly-once" {
					_, err = processor.New(t.Context(), processor.Config{Brokers: sec.brokers, StateDir: t.TempDir(),
						Security: tc.sec, Logger: topo.Logger}, topo)
				} else {
					_, err = atleastonce.New(t.Context(), atleastonce.Config{Brokers: sec.brokers, StateDir: t.TempDir(),
						Security: tc.sec, CommitInterval: time.Second, Logger: topo.Logger}, topo)
				}
				if err == nil {
					t.Fatalf("%s: the worker started", runtime)
				}
				if !kafkautil.Refused(err) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("%s: error %q: want a refusal naming %q", runtime, err, tc.want)
				}
				if tc.sec.SASL.Mechanism != processor.NoSASL && strings.Contains(tc.want, "SASL") &&
					!errors.Is(err, sarama.ErrSASLAuthenticationFailed) {
					t.Fatalf("%s: error %q does not wrap sarama.ErrSASLAuthenticationFailed", runtime, err)
				}
				if strings.Contains(logs.String(), "retrying") {
					t.Fatalf("%s: the refusal was retried:\n%s", runtime, logs)
				}
			}
		})
	}
}

// The command line reaches the same settings: `processor run` with --tls and
// --sasl-* flags, the password from PROCESSOR_SASL_PASSWORD, as a SCRAM user
// with workerACLs only (its retention check included), processes exactly
// once over the SECURE listener alone; `processor verify` and
// `reset-offsets` work over it too (as the PLAIN user, a super user on
// kafka.sh's brokers), and a wrong password ends `processor run` with exit
// status 1 and the reason.
func TestWorkerBinaryOnATLSAndSASLListener(t *testing.T) {
	sec := secureEnv(t)
	e := newEnv(t, 3)
	bin := buildProcessor(t)
	group := e.group("bin-secure")
	user, password := scramUser(t, sec, e.brokers, processor.SASLSCRAMSHA256)
	grant(t, e.brokers, user, workerACLs(group, e.input, e.output, true))
	tls := []string{"--brokers", strings.Join(sec.brokers, ","), "--tls", "--tls-ca-file", sec.caFile}
	runFlags := append([]string{"--sasl-mechanism", "SCRAM-SHA-256", "--sasl-user", user}, tls...)
	runEnv := append(os.Environ(), "PROCESSOR_SASL_PASSWORD="+password)
	flags := append([]string{"--sasl-mechanism", "PLAIN", "--sasl-user", sec.user}, tls...)

	in := events("b", 20)
	e.produce(in...)
	e.produce(in[:5]...)
	run := exec.Command(bin, append([]string{"run", "--group", group, "--input", e.input, "--output", e.output,
		"--state-dir", t.TempDir(), "--http-addr", "", "--key-type", "event-id", "--session-timeout", "3s"}, runFlags...)...)
	run.Env = runEnv
	var logs syncBuffer
	run.Stderr = &logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() {
		if run.ProcessState == nil {
			run.Process.Kill()
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := kafkatest.WaitCommitted(ctx, e.brokers, group, e.input); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	run.Process.Signal(syscall.SIGTERM) // a clean shutdown
	if err := <-exited; err != nil {
		t.Fatalf("processor run: %v\n%s", err, logs.String())
	}
	e.exactlyOnce(in)

	// The tools as a user with toolACLs only.
	toolUser, toolPassword := scramUser(t, sec, e.brokers, processor.SASLSCRAMSHA256)
	grant(t, e.brokers, toolUser, toolACLs(group, e.input, e.output))
	toolFlags := append([]string{"--sasl-mechanism", "SCRAM-SHA-256", "--sasl-user", toolUser}, tls...)
	toolEnv := append(os.Environ(), "PROCESSOR_SASL_PASSWORD="+toolPassword)
	verify := exec.Command(bin, append([]string{"verify", "--input", e.input, "--output", e.output, "--dlq", group + "-dlq"}, toolFlags...)...)
	verify.Env = toolEnv
	out, err := verify.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || !strings.HasPrefix(lines[len(lines)-1], "OK") {
		t.Fatalf("processor verify over the SECURE listener: %v\n%s", err, out)
	}

	e.waitInactive(group) // static membership: the stopped worker's session times out
	reset := exec.Command(bin, append([]string{"reset-offsets", "--group", group, "--input", e.input, "--to", "earliest"}, toolFlags...)...)
	reset.Env = toolEnv
	if out, err := reset.CombinedOutput(); err != nil || !strings.Contains(string(out), e.input) {
		t.Fatalf("processor reset-offsets over the SECURE listener: %v\n%s", err, out)
	}
	committed, err := kafkatest.Committed(e.brokers, group, e.input, []int32{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if committed[0] != 0 || committed[1] != 0 || committed[2] != 0 {
		t.Fatalf("after reset-offsets --to earliest the group's offsets are %v, want 0 each", committed)
	}

	bad := exec.Command(bin, append([]string{"run", "--group", group, "--input", e.input, "--output", e.output,
		"--state-dir", t.TempDir(), "--http-addr", ""}, flags...)...)
	bad.Env = append(os.Environ(), "PROCESSOR_SASL_PASSWORD=wrong")
	out, err = bad.CombinedOutput()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 || !strings.Contains(string(out), "SASL Authentication failed") {
		t.Fatalf("processor run with a wrong password: %v, want exit status 1 naming the SASL failure\n%s", err, out)
	}
	if strings.Contains(string(out), "retrying") {
		t.Fatalf("the refusal was retried:\n%s", out)
	}
}
