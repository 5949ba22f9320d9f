package engine

import (
	"log/slog"
	"strings"
	"time"

	"github.com/lovoo/goka"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/codecs"
)

// Graph builds the goka group graph: one input edge per input topic, all
// judged against the one group table. The input and loop codecs pass bytes
// through: decoding happens in the callback, where a bad record can be
// dead-lettered instead of stopping the processor.
func Graph(t *dedup.Topology) *goka.GroupGraph {
	process := func(ctx goka.Context, msg any) { Process(t, ctx, msg) }
	var edges []goka.Edge
	for _, in := range t.Inputs {
		edges = append(edges, goka.Input(goka.Stream(in), codecs.Bytes{}, process))
	}
	edges = append(edges,
		goka.Loop(codecs.Bytes{}, process),
		goka.Persist(codecs.Seen{}),
		goka.Output(goka.Stream(t.DLQ), codecs.Bytes{}),
	)
	for _, o := range t.Outputs {
		if o != t.DLQ {
			edges = append(edges, goka.Output(goka.Stream(o), codecs.Bytes{}))
		}
	}
	return goka.DefineGroup(goka.Group(t.Group), edges...)
}

func observer(t *dedup.Topology) dedup.Observer {
	if t.Observer == nil {
		return dedup.NopObserver{}
	}
	return t.Observer
}

func logger(t *dedup.Topology) *slog.Logger {
	if t.Logger == nil {
		return slog.Default()
	}
	return t.Logger
}

func now(t *dedup.Topology) time.Time {
	if t.Now == nil {
		return time.Now()
	}
	return t.Now()
}

// isLoop is topic == LoopTopic() without building the name for every record.
func isLoop(t *dedup.Topology, topic string) bool {
	return len(topic) == len(t.Group)+len("-loop") && strings.HasPrefix(topic, t.Group) && strings.HasSuffix(topic, "-loop")
}
