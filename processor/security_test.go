package processor

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// pemFiles writes a self-signed certificate and its key as PEM files.
func pemFiles(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	write := func(path, typ string, der []byte) {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(certFile, "CERTIFICATE", der)
	write(keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func TestValidateNamesTheFlag(t *testing.T) {
	cert, key := pemFiles(t)
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	user := SASL{Mechanism: SASLPlain, User: "u", Password: "p"}
	for _, tc := range []struct {
		name string
		cfg  Security
		want []string // flags named, in any order; none: valid
	}{
		{"zero value: plaintext", Security{}, nil},
		{"TLS with the system's roots", Security{TLS: TLS{Enable: true}}, nil},
		{"TLS with a CA and a client certificate", Security{TLS: TLS{Enable: true, CAFile: cert, CertFile: cert, KeyFile: key}}, nil},
		{"SCRAM over TLS", Security{TLS: TLS{Enable: true, CAFile: cert}, SASL: SASL{Mechanism: SASLSCRAMSHA512, User: "u", Password: "p"}}, nil},
		{"PLAIN without TLS", Security{SASL: user}, nil},
		{"a CA file without TLS", Security{TLS: TLS{CAFile: cert}}, []string{"tls-ca-file"}},
		{"skip-verify without TLS", Security{TLS: TLS{InsecureSkipVerify: true}}, []string{"tls-insecure-skip-verify"}},
		{"missing CA file", Security{TLS: TLS{Enable: true, CAFile: "/nonexistent/ca.pem"}}, []string{"tls-ca-file"}},
		{"CA file without a certificate", Security{TLS: TLS{Enable: true, CAFile: notPEM}}, []string{"tls-ca-file"}},
		{"certificate without key", Security{TLS: TLS{Enable: true, CertFile: cert}}, []string{"tls-key-file"}},
		{"key without certificate", Security{TLS: TLS{Enable: true, KeyFile: key}}, []string{"tls-cert-file"}},
		{"certificate with a key that is not one", Security{TLS: TLS{Enable: true, CertFile: cert, KeyFile: cert}}, []string{"tls-cert-file"}},
		{"unknown mechanism", Security{SASL: SASL{Mechanism: "GSSAPI", User: "u", Password: "p"}}, []string{"sasl-mechanism"}},
		{"mechanism without user and password", Security{SASL: SASL{Mechanism: SASLSCRAMSHA256}}, []string{"sasl-user", "sasl-password"}},
		{"user and password without mechanism", Security{SASL: SASL{User: "u", Password: "p"}}, []string{"sasl-mechanism"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate passed, want errors naming %v", tc.want)
			}
			for _, flag := range tc.want {
				if !strings.Contains(err.Error(), "--"+flag+":") {
					t.Errorf("error %q does not name --%s", err, flag)
				}
			}
			var fe *fieldError
			if !errors.As(err, &fe) {
				t.Errorf("error %q is not a fieldError", err)
			}
		})
	}
}

// Apply must leave sarama a config it accepts (sarama.Config.Validate checks
// the SASL fields, e.g. that SCRAM has a client generator) and that connects
// the way Security says.
func TestApplyMakesAConfigSaramaAccepts(t *testing.T) {
	cert, _ := pemFiles(t)
	for _, tc := range []struct {
		name string
		cfg  Security
	}{
		{"plaintext", Security{}},
		{"TLS", Security{TLS: TLS{Enable: true, CAFile: cert, ServerName: "kafka.internal"}}},
		{"PLAIN", Security{SASL: SASL{Mechanism: SASLPlain, User: "u", Password: "p"}}},
		{"SCRAM-SHA-256 over TLS", Security{TLS: TLS{Enable: true}, SASL: SASL{Mechanism: SASLSCRAMSHA256, User: "u", Password: "p"}}},
		{"SCRAM-SHA-512", Security{SASL: SASL{Mechanism: SASLSCRAMSHA512, User: "u", Password: "p"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sarama.NewConfig()
			if err := tc.cfg.Apply(sc); err != nil {
				t.Fatal(err)
			}
			if err := sc.Validate(); err != nil {
				t.Fatalf("sarama refuses the config: %v", err)
			}
			if sc.Net.TLS.Enable != tc.cfg.TLS.Enable {
				t.Errorf("TLS enabled %v, want %v", sc.Net.TLS.Enable, tc.cfg.TLS.Enable)
			}
			if tls := sc.Net.TLS.Config; tc.cfg.TLS.Enable && (tls == nil || tls.MinVersion < 0x0303) {
				t.Errorf("TLS config %+v: want TLS 1.2 or later", tls)
			}
			if tc.cfg.TLS.CAFile != "" && (sc.Net.TLS.Config.RootCAs == nil || sc.Net.TLS.Config.ServerName != tc.cfg.TLS.ServerName) {
				t.Errorf("TLS config does not carry the CA and server name")
			}
			wantSASL := tc.cfg.SASL.Mechanism != NoSASL
			if sc.Net.SASL.Enable != wantSASL || wantSASL && string(sc.Net.SASL.Mechanism) != string(tc.cfg.SASL.Mechanism) {
				t.Errorf("SASL enable %v mechanism %q, want %q", sc.Net.SASL.Enable, sc.Net.SASL.Mechanism, tc.cfg.SASL.Mechanism)
			}
			if strings.HasPrefix(string(tc.cfg.SASL.Mechanism), "SCRAM") {
				c := sc.Net.SASL.SCRAMClientGeneratorFunc()
				if err := c.Begin("u", "p", ""); err != nil {
					t.Fatal(err)
				}
				first, err := c.Step("")
				if err != nil || !strings.HasPrefix(first, "n,,n=u,r=") {
					t.Fatalf("SCRAM client-first message %q, %v", first, err)
				}
			}
		})
	}
}
