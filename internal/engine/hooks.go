package engine

import (
	"time"

	"github.com/dedupkit/dedup"
)

// tell calls event on every hook of the topology that implements H: each
// hook is told only the events it implements.
func tell[H any](t *dedup.Topology, event func(H)) {
	for _, h := range t.Hooks {
		if x, ok := h.(H); ok {
			event(x)
		}
	}
}

func onProcessed(t *dedup.Topology, partition int32, latency time.Duration) {
	tell(t, func(h dedup.HookProcessed) { h.OnProcessed(partition, latency) })
}

func onSkipped(t *dedup.Topology, partition int32) {
	tell(t, func(h dedup.HookSkipped) { h.OnSkipped(partition) })
}

func onExpired(t *dedup.Topology, partition int32) {
	tell(t, func(h dedup.HookExpired) { h.OnExpired(partition) })
}

func onTooOld(t *dedup.Topology, partition int32) {
	tell(t, func(h dedup.HookTooOld) { h.OnTooOld(partition) })
}

func onDeadLettered(t *dedup.Topology, reason string) {
	tell(t, func(h dedup.HookDeadLettered) { h.OnDeadLettered(reason) })
}

func onHandlerError(t *dedup.Topology) {
	tell(t, func(h dedup.HookHandlerError) { h.OnHandlerError() })
}

func onRekeyed(t *dedup.Topology) { tell(t, func(h dedup.HookRekeyed) { h.OnRekeyed() }) }
