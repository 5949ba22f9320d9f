package engine

import (
	"time"

	"github.com/dedupkit/dedup"
)

// The topology's hooks, each told only the events it implements.

func onProcessed(t *dedup.Topology, partition int32, latency time.Duration) {
	for _, h := range t.Hooks {
		if x, ok := h.(dedup.HookProcessed); ok {
			x.OnProcessed(partition, latency)
		}
	}
}

func onSkipped(t *dedup.Topology, partition int32) {
	for _, h := range t.Hooks {
		if x, ok := h.(dedup.HookSkipped); ok {
			x.OnSkipped(partition)
		}
	}
}

func onExpired(t *dedup.Topology, partition int32) {
	for _, h := range t.Hooks {
		if x, ok := h.(dedup.HookExpired); ok {
			x.OnExpired(partition)
		}
	}
}

func onTooOld(t *dedup.Topology, partition int32) {
	for _, h := range t.Hooks {
		if x, ok := h.(dedup.HookTooOld); ok {
			x.OnTooOld(partition)
		}
	}
}

func onDeadLettered(t *dedup.Topology, reason string) {
	for _, h := range t.Hooks {
		if x, ok := h.(dedup.HookDeadLettered); ok {
			x.OnDeadLettered(reason)
		}
	}
}

func onHandlerError(t *dedup.Topology) {
	for _, h := range t.Hooks {
		if x, ok := h.(dedup.HookHandlerError); ok {
			x.OnHandlerError()
		}
	}
}

func onRekeyed(t *dedup.Topology) {
	for _, h := range t.Hooks {
		if x, ok := h.(dedup.HookRekeyed); ok {
			x.OnRekeyed()
		}
	}
}
