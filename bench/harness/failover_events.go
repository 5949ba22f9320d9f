package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// events brings the group to rest, then makes the scenario's event happen
// Repeat times, each time measuring it and bringing the group back to rest.
// A load that ended (loadEnded closed) before the last event was measured
// fails the scenario: its figures would be measured without load.
func (f *failover) events(ctx context.Context, loadEnded <-chan struct{}, r *ScenarioResult) error {
	var err error
	if f.rest, err = f.steady(ctx, f.ids); err != nil {
		return err
	}
	for rep := 0; rep < f.cfg.Repeat; rep++ {
		var m eventMeasure
		if f.sc.Stop == nil && !f.sc.Leave {
			m, err = f.scaleOutEvent(ctx)
		} else {
			m, err = f.stopEvent(ctx, f.ids[rep%len(f.ids)])
		}
		if err != nil {
			return fmt.Errorf("event %d: %w", rep+1, err)
		}
		select {
		case <-loadEnded:
			return errLoadEnded
		default:
		}
		r.Gaps = append(r.Gaps, m.Gap)
		r.Stalls = append(r.Stalls, m.Stall)
		r.Pauses = append(r.Pauses, m.Pause)
		r.Affected = append(r.Affected, m.Affected)
		handover := ""
		if f.ct.Handover && f.sc.Handover {
			r.Handovers = append(r.Handovers, m.Handover)
			r.HandoverPauses = append(r.HandoverPauses, m.HandoverPause)
			handover = fmt.Sprintf(", tables held after %v (paused %v at most)", m.Handover.Round(time.Millisecond), m.HandoverPause.Round(time.Millisecond))
		}
		f.cfg.logf("%s %s #%d: gap %v (%d partitions affected, paused %v at most), stall of %d unmoved %v%s", f.ct.Name, f.sc.Name, rep+1,
			m.Gap.Round(time.Millisecond), m.Affected, m.Pause.Round(time.Millisecond), m.Unmoved, m.Stall.Round(time.Millisecond), handover)
		if f.rest, err = f.steady(ctx, f.ids); err != nil {
			return fmt.Errorf("after event %d: %w", rep+1, err)
		}
	}
	return nil
}

// steady waits until the group is Stable with exactly the instances ids,
// their standbys caught up (standbysCaughtUp), every partition of the input
// assigned, and every assigned partition
// committed again after the group became stable: the group at rest, under
// load. For a contender that hands a joining instance everything within an
// event (FailoverContender.Handover), every member must also hold its share
// of every topic: a worker that restarted after a kill consumes its
// warm-ups' inputs first, and its rejoin to take their tables over would
// otherwise fall into the next event. It returns the members' identities.
func (f *failover) steady(ctx context.Context, ids []string) ([]string, error) {
	from := time.Now()
	var members []string
	var base *groupSample
	err := f.await(ctx, from.Add(f.cfg.EventTimeout), func() bool {
		for _, s := range f.pol.since(from) {
			if s.at.Before(from) {
				continue
			}
			if base == nil {
				m, ok := identities(s, ids)
				if !ok || s.state != "Stable" || len(s.members) != len(ids) || f.inputOwned(s) < int(f.cfg.Partitions) ||
					(f.ct.Handover && !everyShareHeld(s, m)) {
					continue
				}
				base, members = s, m
				continue
			}
			if !s.stable(members, ownedParts(base)) {
				base = nil // it moved again: start over
				continue
			}
			if advancedAll(base, s) && f.standbysCaughtUp(ids) {
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("group not at rest with %v: %w", ids, err)
	}
	return members, nil
}

func (f *failover) inputOwned(s *groupSample) int {
	n := 0
	for p := range s.owner {
		if p.topic == f.input {
			n++
		}
	}
	return n
}

func ownedParts(s *groupSample) []tp {
	parts := make([]tp, 0, len(s.owner))
	for p := range s.owner {
		parts = append(parts, p)
	}
	return parts
}

// advancedAll: every partition base owns committed beyond its offset in base.
func advancedAll(base, s *groupSample) bool {
	for p := range base.owner {
		if s.committed[p] <= base.committed[p] {
			return false
		}
	}
	return true
}

// measure waits until the event at time at (victim stopped and quiet from
// then on, "" for none) settled with the members want, and returns it.
func (f *failover) measure(ctx context.Context, at, quiet time.Time, victim string, want []string) (eventMeasure, error) {
	var m eventMeasure
	err := f.await(ctx, at.Add(f.cfg.EventTimeout), func() bool {
		var ok bool
		m, ok = measureEvent(f.pol.since(at), at, quiet, victim, want)
		return ok
	})
	if err != nil {
		return m, fmt.Errorf("event at %s not settled with %v: %w", at.Format("15:04:05.000"), want, err)
	}
	return m, nil
}

func without(members []string, m string) []string {
	return slices.DeleteFunc(slices.Clone(members), func(s string) bool { return s == m })
}

// stopEvent stops instance id as the scenario says, restarts it at once
// when it says so, and measures.
func (f *failover) stopEvent(ctx context.Context, id string) (eventMeasure, error) {
	victims, ok := identities(f.pol.latest(), []string{id})
	if !ok {
		return eventMeasure{}, fmt.Errorf("instance %s is not in the group", id)
	}
	victim := victims[0]
	method := f.ct.Leave
	if !f.sc.Leave {
		method = *f.sc.Stop
	}
	c := f.running[id]
	delete(f.running, id)
	at := time.Now()
	if err := c.signalStop(method.Signal); err != nil {
		return eventMeasure{}, err
	}
	quiet := time.Now()
	want := without(f.rest, victim)
	if f.sc.Restart {
		if _, err := f.start(id); err != nil {
			return eventMeasure{}, err
		}
		want = f.rest
	}
	m, err := f.measure(ctx, at, quiet, victim, want)
	if err != nil {
		return m, err
	}
	if !f.sc.Restart { // back to rest
		if _, err := f.start(id); err != nil {
			return m, err
		}
	}
	return m, nil
}

// scaleOutEvent starts one more instance with an empty state dir, measures
// from the moment it joins (the group leaves its rest), then stops it and
// removes its state, so every repetition scales out onto a fresh disk.
func (f *failover) scaleOutEvent(ctx context.Context) (eventMeasure, error) {
	id := fmt.Sprintf("i%d", len(f.ids))
	started := time.Now()
	if _, err := f.start(id); err != nil {
		return eventMeasure{}, err
	}
	defer func() {
		if c := f.running[id]; c != nil {
			delete(f.running, id)
			if err := c.stop(); err != nil {
				f.cfg.logf("stopping %s: %v", id, err)
			}
		}
		os.RemoveAll(filepath.Join(f.stateDir, id))
	}()
	var at time.Time
	var want []string
	err := f.await(ctx, started.Add(f.cfg.EventTimeout), func() bool {
		for _, s := range f.pol.since(started) {
			if s.at.Before(started) {
				continue
			}
			if at.IsZero() && (s.state != "Stable" || !slices.Equal(s.members, f.rest)) {
				at = s.at
			}
			if m, ok := identities(s, append(slices.Clone(f.ids), id)); ok {
				want = m
			}
			if !at.IsZero() && want != nil {
				return true
			}
		}
		return false
	})
	if err != nil {
		return eventMeasure{}, fmt.Errorf("instance %s did not join: %w", id, err)
	}
	// The join was seen at the first sample that showed it; the event is
	// just before it, when the previous sample still showed the group at rest.
	samples := f.pol.since(at)
	if len(samples) > 0 && samples[0].at.Before(at) {
		at = samples[0].at.Add(time.Millisecond)
	}
	m, err := f.measure(ctx, at, at, "", want)
	if err != nil || !f.ct.Handover {
		return m, err
	}
	newcomer, _ := identities(f.pol.latest(), []string{id})
	err = f.await(ctx, at.Add(f.cfg.EventTimeout), func() bool {
		var ok bool
		m.Handover, m.HandoverPause, ok = measureHandover(f.pol.since(at), at, newcomer[0], want)
		return ok
	})
	if err != nil {
		return m, fmt.Errorf("instance %s did not take its share of every topic over: %w", id, err)
	}
	return m, nil
}

var errLoadEnded = errors.New("the steady load's plan ran out before the scenario ended; raise -event-timeout")
