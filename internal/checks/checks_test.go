package checks

import (
	"strings"
	"testing"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func TestPeerAddrs(t *testing.T) {
	for _, tc := range []struct {
		listen, advertise string
		ok                bool
	}{
		{"", "", true},
		{":0", "", true},
		{"10.0.0.1:7000", "w1:7000", true},
		{"10.0.0.1", "", false},
		{":0", ":7000", false},
		{":0", "w1:0", false},
		{"", "w1:7000", false},
	} {
		if err := peerAddrs(tc.listen, tc.advertise); (err == nil) != tc.ok {
			t.Errorf("peerAddrs(%q, %q) = %v, want ok %v", tc.listen, tc.advertise, err, tc.ok)
		}
	}
}

// A listener is opened only with a secret, and the secret must be long
// enough to resist guessing.
func TestPeersNeedASecret(t *testing.T) {
	short := []byte("too short")
	for _, tc := range []struct {
		name   string
		addr   string
		secret []byte
		err    string
	}{
		{"off", "", nil, ""},
		{"on", ":7070", testSecret, ""},
		{"address without a secret", ":7070", nil, "without a peer secret"},
		{"secret without an address", "", testSecret, "without a peer address"},
		{"short secret", ":7070", short, "peer secret of 9 bytes: at least 32"},
	} {
		err := Peers(tc.addr, "", tc.secret)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}
