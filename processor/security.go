package processor

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/IBM/sarama"
)

// Mechanism is a SASL mechanism the worker can authenticate with.
type Mechanism string

// The SASL mechanisms; NoSASL turns SASL off.
const (
	NoSASL          Mechanism = ""
	SASLPlain       Mechanism = "PLAIN"
	SASLSCRAMSHA256 Mechanism = "SCRAM-SHA-256"
	SASLSCRAMSHA512 Mechanism = "SCRAM-SHA-512"
)

// Security is how every Kafka client of the runtime connects: group
// members, transactional producers, the admin client that creates topics,
// the table restore. The zero value is plaintext without authentication.
type Security struct {
	TLS  TLS
	SASL SASL
}

// TLS verifies the brokers' certificates against CAFile (PEM), or the
// system's roots when it is empty. CertFile and KeyFile (PEM, both or
// neither) are a client certificate, for brokers that authenticate clients
// by certificate (ssl.client.auth=required).
type TLS struct {
	Enable             bool
	CAFile             string
	CertFile           string
	KeyFile            string
	ServerName         string // checked against the certificate instead of the broker's host
	InsecureSkipVerify bool   // for a test cluster only: anyone in the path can read and change the traffic
}

// SASL authenticates the worker as User. Over a connection without TLS a
// PLAIN password travels in clear text; SCRAM never sends it.
type SASL struct {
	Mechanism Mechanism
	User      string
	Password  string
}

// fieldError names the setting that is wrong by its flag in `processor
// run` (and the other commands), e.g. "tls-ca-file".
type fieldError struct {
	Field string
	Err   error
}

func (e *fieldError) Error() string { return "--" + e.Field + ": " + e.Err.Error() }
func (e *fieldError) Unwrap() error { return e.Err }

// Validate reports every setting that cannot work, reading the TLS files,
// so that a missing or garbled file fails at start, not at the first
// connection.
func (c Security) Validate() error {
	_, err := c.load()
	return err
}

// Apply sets c on a sarama config, reading the TLS files.
func (c Security) Apply(sc *sarama.Config) error {
	set, err := c.load()
	if err != nil {
		return err
	}
	set(sc)
	return nil
}

// load reads the TLS files once and returns the function that sets c on
// each sarama config a long-running worker builds (clients are rebuilt
// after failures; a file that vanished since the start must not stop that).
func (c Security) load() (func(*sarama.Config), error) {
	b, err := c.build()
	if err != nil {
		return nil, err
	}
	return func(sc *sarama.Config) {
		if b.tls != nil {
			sc.Net.TLS.Enable = true
			sc.Net.TLS.Config = b.tls.Clone()
		}
		if c.SASL.Mechanism != NoSASL {
			sc.Net.SASL.Enable = true
			sc.Net.SASL.Mechanism = sarama.SASLMechanism(c.SASL.Mechanism)
			sc.Net.SASL.User = c.SASL.User
			sc.Net.SASL.Password = c.SASL.Password
			sc.Net.SASL.Handshake = true
			sc.Net.SASL.Version = sarama.SASLHandshakeV1 // Kafka 1.0+: a failure comes back as SASL_AUTHENTICATION_FAILED
			sc.Net.SASL.SCRAMClientGeneratorFunc = b.scram
		}
	}, nil
}

type built struct {
	tls   *tls.Config
	scram func() sarama.SCRAMClient
}

func (c Security) build() (built, error) {
	var b built
	var errs []error
	bad := func(field string, err error) { errs = append(errs, &fieldError{Field: field, Err: err}) }
	t := c.TLS
	if !t.Enable {
		for _, f := range []struct{ name, v string }{{"tls-ca-file", t.CAFile}, {"tls-cert-file", t.CertFile},
			{"tls-key-file", t.KeyFile}, {"tls-server-name", t.ServerName}} {
			if f.v != "" {
				bad(f.name, errors.New("set without --tls; add --tls to connect with TLS"))
			}
		}
		if t.InsecureSkipVerify {
			bad("tls-insecure-skip-verify", errors.New("set without --tls"))
		}
	} else {
		b.tls = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
		if t.CAFile != "" {
			pool, err := loadCA(t.CAFile)
			if err != nil {
				bad("tls-ca-file", err)
			}
			b.tls.RootCAs = pool
		}
		switch {
		case t.CertFile != "" && t.KeyFile != "":
			pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				bad("tls-cert-file", fmt.Errorf("client certificate %s with key %s: %w", t.CertFile, t.KeyFile, err))
			}
			b.tls.Certificates = []tls.Certificate{pair}
		case t.CertFile != "":
			bad("tls-key-file", errors.New("required with --tls-cert-file"))
		case t.KeyFile != "":
			bad("tls-cert-file", errors.New("required with --tls-key-file"))
		}
	}
	s := c.SASL
	switch s.Mechanism {
	case NoSASL:
		if s.User != "" || s.Password != "" {
			bad("sasl-mechanism", errors.New("required with --sasl-user and --sasl-password: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"))
		}
	case SASLPlain, SASLSCRAMSHA256, SASLSCRAMSHA512:
		if s.User == "" {
			bad("sasl-user", fmt.Errorf("required with --sasl-mechanism=%s", s.Mechanism))
		}
		if s.Password == "" {
			bad("sasl-password", fmt.Errorf("required with --sasl-mechanism=%s (PROCESSOR_SASL_PASSWORD keeps it off the command line)", s.Mechanism))
		}
		b.scram = scramClient(s.Mechanism)
	default:
		bad("sasl-mechanism", fmt.Errorf("%q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism))
	}
	return b, errors.Join(errs...)
}

func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
