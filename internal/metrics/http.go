package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics from g, /healthz (200 while health() is live:
// the worker need not be restarted) and /readyz (200 while it is ready:
// every assigned partition's table is recovered and the worker commits),
// each with health() as JSON, 503 otherwise. Callers may add routes to the
// returned mux.
func Handler(g prometheus.Gatherer, health func() Health) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := health()
		serveHealth(w, h, h.Live)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		h := health()
		serveHealth(w, h, h.Ready)
	})
	return mux
}

// Serve listens on addr before returning, so a bad address fails at start,
// and serves h until ctx is done. The returned function waits for shutdown.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (wait func() error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	log.Info("http listening", "addr", ln.Addr().String())
	stop := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-stop:
		}
		shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutCtx)
	}()
	return func() error {
		close(stop)
		return <-done
	}, nil
}
