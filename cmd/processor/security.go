package main

import (
	"flag"
	"log/slog"
	"strings"

	"github.com/dedupkit/dedup/processor"
)

// securityFlags binds the TLS and SASL flags that every command talking to
// Kafka takes (run, verify and the admin commands), so one set of
// PROCESSOR_* variables serves them all.
func securityFlags(fs *flag.FlagSet, s *processor.Security) {
	fs.BoolVar(&s.TLS.Enable, "tls", false, "connect to the brokers with TLS")
	fs.StringVar(&s.TLS.CAFile, "tls-ca-file", "", "PEM file of the CA certificates the brokers' certificates are checked against (default: the system's)")
	fs.StringVar(&s.TLS.CertFile, "tls-cert-file", "", "PEM client certificate, for brokers that require one (ssl.client.auth=required); with --tls-key-file")
	fs.StringVar(&s.TLS.KeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&s.TLS.ServerName, "tls-server-name", "", "name the brokers' certificates must carry, when it is not the host in --brokers")
	fs.BoolVar(&s.TLS.InsecureSkipVerify, "tls-insecure-skip-verify", false, "accept any broker certificate (test clusters only: anyone in between can read and change the traffic)")
	fs.Func("sasl-mechanism", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default: no SASL)", func(v string) error {
		s.SASL.Mechanism = processor.Mechanism(strings.ToUpper(v))
		return nil
	})
	fs.StringVar(&s.SASL.User, "sasl-user", "", "SASL user")
	fs.StringVar(&s.SASL.Password, "sasl-password", "", "SASL password; prefer the variable PROCESSOR_SASL_PASSWORD, which ps does not show")
}

// warnCleartext says so when a PLAIN password will cross the network in
// clear text: allowed (a private network may be trusted), never silent.
func warnCleartext(s processor.Security, log *slog.Logger) {
	if s.SASL.Mechanism == processor.SASLPlain && !s.TLS.Enable {
		log.Warn("--sasl-mechanism=PLAIN without --tls: the password is sent to the brokers in clear text")
	}
}
