package main

import (
	"bytes"
	"flag"
	"log/slog"
	"os"

	"github.com/dedupkit/dedup/internal/checks"
	"github.com/dedupkit/dedup/processor"
)

// peerSecretEnv holds the liveness connections' shared secret itself. A
// flag would show the secret to every user of the host (ps), so the binary
// takes it only from this variable or from the file --peer-secret-file names.
const peerSecretEnv = "DEDUP_PEER_SECRET"

// defaultPeerAddr is where the liveness listener opens once a peer secret is
// set: one fixed port for every instance of a group, as brokers share their
// listeners' port, so that an instance dials no other port
// (processor.Config.Peers.Addr). Without a secret no port opens.
const defaultPeerAddr = ":7070"

// peerFlags binds the liveness connections' flags.
func peerFlags(fs *flag.FlagSet, cfg *Config) {
	fs.StringVar(&cfg.PeerAddr, "peer-addr", defaultPeerAddr, "where this instance listens for the liveness connections of the group's other instances (exactly-once; only with a peer secret: without one no port opens). Each holds one to every other, and when one ends and its address refuses, that instance's process is gone (kill -9, a crash), so its open transactions are aborted at once instead of after --fence-stuck-after. Every instance of a group uses the same port, and dials no other; :0 picks a free port and lifts that rule (several instances on one host)")
	fs.StringVar(&cfg.PeerAdvertise, "peer-advertise", "", "host:port the group's other instances dial for --peer-addr (behind NAT, or a port mapped elsewhere); empty: --peer-addr's host when it names one, otherwise this host's address on its route to the brokers")
	fs.StringVar(&cfg.PeerSecretFile, "peer-secret-file", "", "file holding the group's shared secret for the liveness connections (the same on every instance, at least 32 bytes, surrounding whitespace ignored: openssl rand -base64 48). Instead of it, the variable "+peerSecretEnv+" may hold the secret itself. Without either the liveness listener stays closed and a dead instance's partitions wait --fence-stuck-after (exactly-once)")
}

// peerSources notes, after parsing, which liveness settings the user gave:
// an explicit --peer-addr without a secret is refused, the default is not.
func (cfg *Config) peerSources(fs *flag.FlagSet, env func(string) (string, bool)) {
	fs.Visit(func(f *flag.Flag) { // set on the command line or from PROCESSOR_*
		if f.Name == "peer-addr" {
			cfg.peerAddrSet = true
		}
	})
	cfg.peerSecretEnv, cfg.peerSecretEnvSet = env(peerSecretEnv)
}

// checkPeers reads the peer secret (from --peer-secret-file or
// DEDUP_PEER_SECRET) into cfg.PeerSecret and reports what cannot work,
// naming the flag.
func (cfg *Config) checkPeers(bad func(flag, format string, args ...any)) {
	var secret []byte
	source := "--peer-secret-file " + cfg.PeerSecretFile
	switch {
	case cfg.PeerSecretFile != "" && cfg.peerSecretEnvSet:
		bad("peer-secret-file", "set it or %s, not both", peerSecretEnv)
		return
	case cfg.PeerSecretFile != "":
		b, err := os.ReadFile(cfg.PeerSecretFile)
		if err != nil {
			bad("peer-secret-file", "cannot read the peer secret: %v", err)
			return
		}
		secret = bytes.TrimSpace(b)
	case cfg.peerSecretEnvSet:
		secret, source = bytes.TrimSpace([]byte(cfg.peerSecretEnv)), peerSecretEnv
	}
	cfg.PeerSecret = secret
	given := cfg.PeerSecretFile != "" || cfg.peerSecretEnvSet
	if cfg.Guarantee == BestEffort {
		if given || cfg.peerAddrSet || cfg.PeerAdvertise != "" {
			bad("peer-addr", "exactly-once only (best-effort writes no transactions to abort): --peer-addr, "+
				"--peer-advertise, --peer-secret-file and %s", peerSecretEnv)
		}
		return
	}
	if given && len(secret) < processor.MinPeerSecret {
		bad("peer-secret-file", "%s holds a secret of %d bytes: at least %d (make one with openssl rand -base64 48)",
			source, len(secret), processor.MinPeerSecret)
		return
	}
	if !given && ((cfg.peerAddrSet && cfg.PeerAddr != "") || cfg.PeerAdvertise != "") {
		bad("peer-addr", "the liveness listener needs the group's peer secret: set --peer-secret-file or %s "+
			"(the same on every instance), or leave --peer-addr and --peer-advertise unset", peerSecretEnv)
		return
	}
	if !given {
		return
	}
	if err := checks.Peers(cfg.PeerAddr, cfg.PeerAdvertise, secret); err != nil {
		name := "peer-addr"
		if cfg.PeerAdvertise != "" && cfg.PeerAddr != "" {
			name = "peer-advertise"
		}
		bad(name, "%v", err)
	}
}

// peerAddr is the liveness listener's address: none without a secret.
func (cfg *Config) peerAddr() string {
	if len(cfg.PeerSecret) == 0 {
		return ""
	}
	return cfg.PeerAddr
}

// logPeersOff tells, once at start, how to turn the liveness connections on
// and what they buy, when an exactly-once worker runs without them.
func logPeersOff(cfg *Config, log *slog.Logger) {
	if cfg.Guarantee != ExactlyOnce || len(cfg.PeerSecret) > 0 {
		return
	}
	log.Info("liveness connections are off (no peer secret): a killed instance's partitions move after --fence-stuck-after. "+
		"Give every instance of the group the same secret in --peer-secret-file or "+peerSecretEnv+
		" (openssl rand -base64 48) and they move in well under a second; the instances then listen on --peer-addr",
		"peerAddr", cfg.PeerAddr)
}
