package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// withPeerSecret is an environment that gives the liveness connections a
// secret of the minimum length.
var withPeerSecret = map[string]string{peerSecretEnv: strings.Repeat("s", 32)}

// The liveness listener opens only with a secret from a file or
// DEDUP_PEER_SECRET; every mistake stops the start, naming the flag.
func TestPeerSecret(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good", "  "+strings.Repeat("k", 64)+"\n")
	short := file("short", "12345\n")
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		err      string
		addr     string // the listener's address when it starts
		secretOf int    // bytes of the secret read
	}{
		{"no secret: no listener", required, nil, "", "", 0},
		{"no secret, --peer-addr turned off", append(required, "--peer-addr", ""), nil, "", "", 0},
		{"a secret file, whitespace trimmed", append(required, "--peer-secret-file", good), nil, "", defaultPeerAddr, 64},
		{"a secret file from the environment", required, map[string]string{"PROCESSOR_PEER_SECRET_FILE": good}, "", defaultPeerAddr, 64},
		{"a secret in the environment", append(required, "--peer-addr", "127.0.0.1:0"), withPeerSecret, "", "127.0.0.1:0", 32},
		{"--peer-addr without a secret", append(required, "--peer-addr", ":7070"), nil,
			"--peer-addr: the liveness listener needs the group's peer secret: set --peer-secret-file or DEDUP_PEER_SECRET", "", 0},
		{"--peer-addr from the environment without a secret", required, map[string]string{"PROCESSOR_PEER_ADDR": ":7000"},
			"--peer-addr: the liveness listener needs the group's peer secret", "", 0},
		{"--peer-advertise without a secret", append(required, "--peer-advertise", "w1:7070"), nil,
			"--peer-addr: the liveness listener needs the group's peer secret", "", 0},
		{"unreadable file", append(required, "--peer-secret-file", filepath.Join(dir, "missing")), nil,
			"--peer-secret-file: cannot read the peer secret: open " + filepath.Join(dir, "missing"), "", 0},
		{"short file", append(required, "--peer-secret-file", short), nil,
			"--peer-secret-file: --peer-secret-file " + short + " holds a secret of 5 bytes: at least 32", "", 0},
		{"short variable", required, map[string]string{peerSecretEnv: "short"},
			"--peer-secret-file: DEDUP_PEER_SECRET holds a secret of 5 bytes: at least 32", "", 0},
		{"empty variable", required, map[string]string{peerSecretEnv: ""},
			"DEDUP_PEER_SECRET holds a secret of 0 bytes", "", 0},
		{"both", append(required, "--peer-secret-file", good), withPeerSecret,
			"--peer-secret-file: set it or DEDUP_PEER_SECRET, not both", "", 0},
		{"a secret with best-effort", append(required, "--guarantee", "best-effort"), withPeerSecret,
			"--peer-addr: exactly-once only", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig("t", tc.args, envMap(tc.env))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.peerAddr(); got != tc.addr {
				t.Errorf("listener address %q, want %q", got, tc.addr)
			}
			if len(cfg.PeerSecret) != tc.secretOf {
				t.Errorf("secret of %d bytes, want %d", len(cfg.PeerSecret), tc.secretOf)
			}
		})
	}
}

// Without a secret the worker says once how to turn the liveness
// connections on; with one it says nothing of it.
func TestLogPeersOff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		lines int
	}{{"off", nil, 1}, {"on", withPeerSecret, 0}} {
		cfg, err := parseConfig("t", required, envMap(tc.env))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		logPeersOff(cfg, slog.New(slog.NewTextHandler(&out, nil)))
		if got := strings.Count(out.String(), "liveness connections are off"); got != tc.lines {
			t.Errorf("%s: %d lines, want %d:\n%s", tc.name, got, tc.lines, out.String())
		}
		if tc.lines > 0 && !strings.Contains(out.String(), "--peer-secret-file or DEDUP_PEER_SECRET") {
			t.Errorf("%s: the line does not say how to turn them on:\n%s", tc.name, out.String())
		}
		if strings.Contains(out.String(), "ssss") {
			t.Errorf("%s: the secret was logged:\n%s", tc.name, out.String())
		}
	}
}
