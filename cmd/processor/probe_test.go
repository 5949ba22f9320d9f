package main

import (
	"bytes"
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup/internal/metrics"
)

// TestProbe asks the worker's own HTTP handler, as a container health check
// does, for a worker that is live but not ready.
func TestProbe(t *testing.T) {
	srv := httptest.NewServer(metrics.Handler(prometheus.NewRegistry(), func() metrics.Health {
		return metrics.Health{Live: true, Reasons: []string{"partitions are being restored"}}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	closed := httptest.NewServer(nil)
	closedAddr := closed.Listener.Addr().String()
	closed.Close()

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string // "" for exit 0
		stdout  string
	}{
		{"live", []string{"--http-addr", ":" + port}, nil, "", `"live":true`},
		{"not ready", []string{"--http-addr", ":" + port, "--path", "/readyz"}, nil, "503 Service Unavailable", "partitions are being restored"},
		{"address from the worker's variable", []string{"--path", "/healthz"}, map[string]string{"PROCESSOR_HTTP_ADDR": "0.0.0.0:" + port}, "", `"live":true`},
		{"flag wins over the variable", []string{"--http-addr", "127.0.0.1:" + port}, map[string]string{"PROCESSOR_HTTP_ADDR": closedAddr}, "", `"live":true`},
		{"no route", []string{"--http-addr", ":" + port, "--path", "/nothing"}, nil, "404 Not Found", ""},
		{"nothing listening", []string{"--http-addr", closedAddr}, nil, "connection refused", ""},
		{"relative path", []string{"--http-addr", ":" + port, "--path", "healthz"}, nil, "want an absolute path", ""},
		{"no port", []string{"--http-addr", "localhost"}, nil, "missing port", ""},
		{"argument", []string{"now"}, nil, "unexpected arguments", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			var stdout bytes.Buffer
			err := runProbe(context.Background(), tt.args, env, &stdout)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if !strings.Contains(stdout.String(), tt.stdout) {
				t.Errorf("stdout %q lacks %q", stdout.String(), tt.stdout)
			}
		})
	}
}

func TestProbeURL(t *testing.T) {
	tests := []struct{ addr, want string }{
		{":8080", "http://127.0.0.1:8080/healthz"},
		{"0.0.0.0:8080", "http://127.0.0.1:8080/healthz"},
		{"[::]:8080", "http://[::1]:8080/healthz"},
		{"10.1.2.3:9000", "http://10.1.2.3:9000/healthz"},
		{"localhost:8080", "http://localhost:8080/healthz"},
	}
	for _, tt := range tests {
		if got, err := probeURL(tt.addr, "/healthz"); err != nil || got != tt.want {
			t.Errorf("probeURL(%q) = %q, %v; want %q", tt.addr, got, err, tt.want)
		}
	}
}
