// Package guarantee names the worker's delivery guarantees, the values of
// --guarantee that `processor run` and the demo take.
package guarantee

import "fmt"

const (
	ExactlyOnce = "exactly-once"
	// BestEffort runs goka's own runtime. It is named after what it gives:
	// goka marks an event seen (LevelDB and changelog) in the callback and
	// emits the output asynchronously, so a kill between the two loses the
	// output, and a kill between output and offset commit repeats it.
	BestEffort = "best-effort"
)

// Check says why g is not a --guarantee value.
func Check(g string) error {
	switch g {
	case ExactlyOnce, BestEffort:
		return nil
	}
	return fmt.Errorf("%q is not %s or %s", g, ExactlyOnce, BestEffort)
}
