package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// probeFlags binds `processor probe`'s flags. --http-addr is run's flag
// with run's variable PROCESSOR_HTTP_ADDR, so inside the worker's container
// the probe asks the address the worker listens on without being told.
func probeFlags(addr, path *string, timeout *time.Duration) *flag.FlagSet {
	fs := flag.NewFlagSet("processor probe", flag.ContinueOnError)
	fs.StringVar(addr, "http-addr", ":8080", "the worker's --http-addr; an empty or unspecified host is asked on the loopback address")
	fs.StringVar(path, "path", "/healthz", "/healthz (live) or /readyz (ready)")
	fs.DurationVar(timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	return fs
}

// runProbe is `processor probe`: a health check for images without a shell
// or an HTTP client (the worker's image is distroless), e.g. a Docker
// healthcheck. It exits 0 when the worker answers 200 and 1 otherwise,
// printing the worker's JSON, which says why.
func runProbe(ctx context.Context, args []string, env func(string) (string, bool), stdout io.Writer) error {
	var addr, path string
	var timeout time.Duration
	fs := probeFlags(&addr, &path, &timeout)
	if err := setFromEnv(fs, env); err != nil {
		return err
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	url, err := probeURL(addr, path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	fmt.Fprintf(stdout, "%s %s\n", url, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}

// probeURL turns a listen address into the URL to ask: a worker listening
// on every interface (":8080", "0.0.0.0:8080", "[::]:8080") is reached on
// the loopback address.
func probeURL(addr, path string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--http-addr %q: %w", addr, err)
	}
	if port == "" {
		return "", fmt.Errorf("--http-addr %q: no port", addr)
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	if !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("--path %q: want an absolute path such as /healthz", path)
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}
