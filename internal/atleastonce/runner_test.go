package atleastonce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/hashicorp/go-multierror"

	"github.com/dedupkit/dedup"
)

// fakeProc stands in for a goka processor: Run fails with err at once, or,
// when err is nil, runs until ctx ends and returns stopErr (nil: ctx.Err()).
type fakeProc struct {
	name    string
	err     error
	stopErr error
	started chan string
}

func (f *fakeProc) Run(ctx context.Context) error {
	f.started <- f.name
	if f.err != nil {
		return f.err
	}
	<-ctx.Done()
	if f.stopErr != nil {
		return f.stopErr
	}
	return ctx.Err()
}
func (f *fakeProc) Get(string) (any, error) { return f.name, nil }
func (f *fakeProc) Recovered() bool         { return f.err == nil }

// goka's error when closing its consumer group at a stop finds the member
// gone from the group's generation (seen in make chaos at a scale-down:
// sarama's Close returns the last error its consumers reported).
//
//lint:ignore ST1005 goka's own error text, capitalised as goka writes it
var leftGroup = &multierror.Error{Errors: []error{fmt.Errorf("Error closing consumer group: %w",
	&sarama.ConsumerError{Topic: "g-loop", Partition: 6, Err: sarama.ErrUnknownMemberId})}}

// goka's error when the processor is stopped before its tables are up, as
// processor run returns it (seen in make chaos: a worker scaled down 0.1 s
// after it started).
var errStoppedStarting = fmt.Errorf("goka processor: %w", &multierror.Error{Errors: []error{
	fmt.Errorf("error waiting for start up tables: %w", errors.New(gokaStartInterrupted))}})

// goka's wrapping of a consumer-group error when the coordinator's broker dies.
//
//lint:ignore ST1005 goka's own error text, capitalised as goka writes it
var coordinatorGone = errors.Join(errors.New("Error closing consumer group: connection refused"),
	fmt.Errorf("error consuming from group consumer: %w", io.EOF))

// runWatched runs r until Run returns and reports the processors started,
// in order. Once the one named cancelWhen has started, it calls before and
// cancels Run's context ("" = never).
func runWatched(t *testing.T, r *Runner, started <-chan string, cancelWhen string, before func(name string)) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var runs []string
	for {
		select {
		case name := <-started:
			runs = append(runs, name)
			if name == cancelWhen {
				before(name)
				cancel()
			}
		case err := <-done:
			// Every processor sent its name before its Run returned, and so
			// before Run did: the names not received yet are in started.
			// (The select above may take done while started holds one.)
			for {
				select {
				case name := <-started:
					runs = append(runs, name)
				default:
					return runs, err
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Run still running after 10s; processors started: %v", runs)
		}
	}
}

// logSignal is a log handler that closes seen once a record with message
// msg is logged: a test waits for a step that has no other sign.
type logSignal struct {
	msg  string
	once sync.Once
	seen chan struct{}
}

func newLogSignal(msg string) *logSignal { return &logSignal{msg: msg, seen: make(chan struct{})} }

func (l *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == l.msg {
		l.once.Do(func() { close(l.seen) })
	}
	return nil
}
func (l *logSignal) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSignal) WithGroup(string) slog.Handler      { return l }

func TestRunnerReplacesAProcessorThatStoppedOnABrokerError(t *testing.T) {
	for _, tc := range []struct {
		name       string
		firstErr   error   // the first processor's Run result
		stopErr    error   // the first processor's Run result when stopped
		buildErrs  []error // results of building its successors, in order; then a healthy one
		backoff    time.Duration
		wantRuns   []string // processors started, in order
		wantErr    string   // Run's error ("" = ran until cancelled)
		cancelWhen string   // cancel once this processor started ("" = never)
		// cancel only once Run waits to build the next processor: a cancel
		// right after p0 started can come before p0's Run returned its error,
		// and a stop with a failure ends Run with that failure.
		cancelWaiting bool
	}{
		{name: "coordinator died: a new processor takes over", firstErr: coordinatorGone, backoff: time.Millisecond,
			wantRuns: []string{"p0", "p1"}, cancelWhen: "p1"},
		{name: "the cluster is not back at once: building is retried", firstErr: coordinatorGone, backoff: time.Millisecond,
			buildErrs: []error{errors.New("Error creating topic manager: cannot connect to broker")},
			wantRuns:  []string{"p0", "p2"}, cancelWhen: "p2"},
		{name: "not a broker error: Run ends with it", firstErr: errors.New("partition count mismatch"), backoff: time.Millisecond,
			wantRuns: []string{"p0"}, wantErr: "partition count mismatch"},
		{name: "stopped while waiting to rebuild", firstErr: coordinatorGone, backoff: time.Hour,
			wantRuns: []string{"p0"}, cancelWhen: "p0", cancelWaiting: true},
		{name: "stopped, and leaving the group failed: a clean stop", stopErr: leftGroup, backoff: time.Millisecond,
			wantRuns: []string{"p0"}, cancelWhen: "p0"},
		{name: "stopped while starting: a clean stop", stopErr: errStoppedStarting, backoff: time.Millisecond,
			wantRuns: []string{"p0"}, cancelWhen: "p0"},
		{name: "the same error without a stop: Run ends with it", firstErr: errStoppedStarting, backoff: time.Millisecond,
			wantRuns: []string{"p0"}, wantErr: gokaStartInterrupted},
		{name: "stopped, and the processor failed: Run ends with it", stopErr: errors.New("callback failed"),
			backoff: time.Millisecond, wantRuns: []string{"p0"}, wantErr: "callback failed", cancelWhen: "p0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan string, 10)
			builds := 0
			waiting := newLogSignal("goka processor stopped; starting a new one")
			r := &Runner{cfg: Config{Logger: slog.New(waiting)}, topo: &dedup.Topology{Group: "g", Inputs: []string{"in"}},
				firstBackoff: tc.backoff, lag: nopLag()}
			r.newProc = func() (gokaProcessor, error) {
				builds++
				if builds <= len(tc.buildErrs) {
					return nil, tc.buildErrs[builds-1]
				}
				return &fakeProc{name: fmt.Sprintf("p%d", builds), started: started}, nil
			}
			var first gokaProcessor = &fakeProc{name: "p0", err: tc.firstErr, stopErr: tc.stopErr, started: started}
			r.proc.Store(&first)

			runs, err := runWatched(t, r, started, tc.cancelWhen, func(name string) {
				if tc.cancelWaiting {
					select {
					case <-waiting.seen:
					case <-time.After(10 * time.Second):
						t.Errorf("Run not waiting to build a new processor 10s after %s started", name)
					}
				}
				if name != "p0" && !r.Ready() {
					t.Errorf("Ready() false after %s took over", name)
				}
			})
			if strings.Join(runs, ",") != strings.Join(tc.wantRuns, ",") {
				t.Errorf("processors started %v, want %v", runs, tc.wantRuns)
			}
			if tc.wantErr == "" && err != nil {
				t.Errorf("Run: %v, want nil", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Run: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// goka formats a storage error with %v; a lookup that hit a damaged block
// fails the processor with a panic's text like this one.
var errDamagedLookup = errors.New("panic in callback: error getting from leveldb (key e-1): leveldb: corrupted or incompatible")

// A processor that failed while a table store of the group is damaged is
// replaced (the new one's storage builder replaces the store); with every
// store healthy, the same error ends Run. Stores of other tables are not
// looked at.
func TestRunnerReplacesAProcessorThatFailedOnADamagedStore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		damage   string // store dir to garble ("" = none)
		wantRuns []string
		wantErr  bool
	}{
		{name: "the group table's store is damaged", damage: "g-table.1", wantRuns: []string{"p0", "p1"}},
		{name: "every store is healthy", wantRuns: []string{"p0"}, wantErr: true},
		{name: "only another table's store is damaged", damage: "other-table.1", wantRuns: []string{"p0"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, name := range []string{"g-table.0", "g-table.1", "other-table.1"} {
				st, _ := buildStore(t, filepath.Join(dir, "tmp"), slog.New(slog.DiscardHandler))
				if err := st.Set("e-1", []byte("v")); err != nil {
					t.Fatal(err)
				}
				st.Close()
				if err := os.Rename(filepath.Join(dir, "tmp", "t.0"), filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.damage != "" {
				garbleManifests(t, filepath.Join(dir, tc.damage))
			}
			var logs bytes.Buffer
			started := make(chan string, 10)
			r := &Runner{cfg: Config{StateDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
				topo: &dedup.Topology{Group: "g", Inputs: []string{"in"}}, firstBackoff: time.Millisecond, lag: nopLag()}
			r.newProc = func() (gokaProcessor, error) { return &fakeProc{name: "p1", started: started}, nil }
			var first gokaProcessor = &fakeProc{name: "p0", err: errDamagedLookup, started: started}
			r.proc.Store(&first)

			runs, err := runWatched(t, r, started, "p1", func(string) {})
			if strings.Join(runs, ",") != strings.Join(tc.wantRuns, ",") {
				t.Errorf("processors started %v, want %v", runs, tc.wantRuns)
			}
			if (err != nil) != tc.wantErr {
				t.Errorf("Run: %v, want an error: %v", err, tc.wantErr)
			}
			if got := strings.Contains(logs.String(), "damaged table store"); got != (len(tc.wantRuns) > 1) {
				t.Errorf("damage logged: %v (log: %s)", got, logs.String())
			}
		})
	}
}
