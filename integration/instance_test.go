package integration

import (
	"errors"
	"testing"
	"time"

	"github.com/dedupkit/dedup/processor"
)

// TestSecondInstanceWithTheSameIDFencesTheFirst starts a second live
// instance with the first one's instance ID (a copy of a StatefulSet pod, a
// misconfigured deploy): the first stops with ErrInstanceFenced instead of
// taking its identity back, which would fence the second in turn, and the
// second processes every event exactly once.
func TestSecondInstanceWithTheSameIDFencesTheFirst(t *testing.T) {
	e := newEnv(t, 2)
	group := e.group("fence")
	first := e.topology(group, &counter{})
	a := e.startEOS(first, processor.Config{StateDir: t.TempDir(), InstanceID: "dedup-0"})
	until(t, 60*time.Second, "the first instance to be assigned", a.ready)
	in := events("before", 20)
	e.produce(in...)
	e.waitProcessed(group)

	b := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), InstanceID: "dedup-0"})
	select {
	case err := <-a.done:
		a.cancel = nil // stopped already
		if !errors.Is(err, processor.ErrInstanceFenced) {
			t.Fatalf("first instance stopped with %v, want ErrInstanceFenced", err)
		}
		t.Logf("first instance: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the first instance kept running next to a second with its instance ID")
	}
	more := events("after", 20)
	e.produce(more...)
	e.waitProcessed(group)
	e.exactlyOnce(append(in, more...))
	select {
	case err := <-b.done:
		b.cancel = nil
		t.Fatalf("the second instance stopped too: %v", err)
	default:
	}
}
