package redrive

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/dedupkit/dedup"
)

// MaxListed bounds the moves and refusals a Report lists (its counts are
// exact), so a re-drive of millions keeps a small report.
const MaxListed = 1000

// Report is what a run read and did. In a dry run, Redriven, ByReason and
// Moves are what the run would have moved. After an error, the counts are
// of what was committed before it.
type Report struct {
	DLQ    string
	DryRun bool
	// Scanned is every dead letter read; Matched those that passed the
	// filters: each of them was re-driven, had been re-driven by an earlier
	// run, or is not re-drivable.
	Scanned, Matched int
	Redriven         int
	AlreadyRedriven  int
	// Skipped counts the dead letters a filter left, by filter
	// (FilterGroup, FilterReason, FilterTime); a later run may move them.
	Skipped map[string]int
	// NotRedrivable counts the matched dead letters that cannot be moved,
	// by cause (the Why constants).
	NotRedrivable map[string]int
	// ByReason counts the re-driven dead letters by dlq-reason.
	ByReason map[string]int
	// Again counts the re-driven dead letters that were copies an earlier
	// re-drive wrote and that failed again: the cause may not be fixed.
	Again int
	// LimitReached says the run stopped at Config.Limit with dead letters
	// left to read.
	LimitReached bool
	// Pruned is how many state records of dead letters that retention
	// deleted were removed.
	Pruned int

	Moves   []Move    // the first MaxListed re-driven
	Refused []Refusal // the first MaxListed not re-drivable
}

// Move is one re-driven dead letter: where it was, where its copy went
// (Offset -1 in a dry run) and why it had been dead-lettered.
type Move struct {
	From   dedup.Position
	To     dedup.Position
	Reason string
}

// Refusal is one dead letter that passed the filters and cannot be moved.
type Refusal struct {
	At     dedup.Position
	Reason string // its dlq-reason
	Why    string
}

func newReport(cfg Config) *Report {
	return &Report{DLQ: cfg.DLQ, DryRun: cfg.DryRun, Skipped: map[string]int{}, NotRedrivable: map[string]int{}, ByReason: map[string]int{}}
}

// SkippedTotal is the dead letters the filters left.
func (r *Report) SkippedTotal() int {
	n := 0
	for _, v := range r.Skipped {
		n += v
	}
	return n
}

// NotRedrivableTotal is the matched dead letters that cannot be moved.
func (r *Report) NotRedrivableTotal() int {
	n := 0
	for _, v := range r.NotRedrivable {
		n += v
	}
	return n
}

func (r *Report) refuse(d *deadLetter, why string) {
	r.NotRedrivable[why]++
	if len(r.Refused) < MaxListed {
		r.Refused = append(r.Refused, Refusal{At: d.pos, Reason: d.reason, Why: why})
	}
}

func (r *Report) moved(m Move, again bool) {
	r.Redriven++
	r.ByReason[m.Reason]++
	if again {
		r.Again++
	}
	if len(r.Moves) < MaxListed {
		r.Moves = append(r.Moves, m)
	}
}

// Print writes the report, listing at most show moves and refusals. A dry
// run says so on its first line: its counts must never read as a move.
func (r *Report) Print(w io.Writer, show int) {
	if r.DryRun {
		fmt.Fprintf(w, "dry run: nothing written; dead-letter topic %s\n", r.DLQ)
	} else {
		fmt.Fprintf(w, "dead-letter topic %s\n", r.DLQ)
	}
	fmt.Fprintf(w, "scanned:            %d\n", r.Scanned)
	fmt.Fprintf(w, "skipped by filter:  %d%s\n", r.SkippedTotal(), counts(r.Skipped))
	fmt.Fprintf(w, "matched:            %d\n", r.Matched)
	verb := "re-driven:          "
	if r.DryRun {
		verb = "would re-drive:     "
	}
	fmt.Fprintf(w, "%s%d%s\n", verb, r.Redriven, counts(r.ByReason))
	if r.Again > 0 {
		fmt.Fprintf(w, "  %d of them failed again after an earlier re-drive: is the cause fixed?\n", r.Again)
	}
	fmt.Fprintf(w, "already re-driven:  %d\n", r.AlreadyRedriven)
	fmt.Fprintf(w, "not re-drivable:    %d\n", r.NotRedrivableTotal())
	for _, why := range sortedKeys(r.NotRedrivable) {
		fmt.Fprintf(w, "  %d  %s\n", r.NotRedrivable[why], why)
	}
	if r.LimitReached {
		fmt.Fprintln(w, "stopped at --limit; run again for the rest")
	}
	if r.Pruned > 0 {
		fmt.Fprintf(w, "state records of dead letters deleted by retention removed: %d\n", r.Pruned)
	}
	if n := min(show, len(r.Moves)); n > 0 {
		what := "moved"
		if r.DryRun {
			what = "it would move"
		}
		fmt.Fprintf(w, "first %d of %d %s:\n", n, r.Redriven, what)
		for _, m := range r.Moves[:n] {
			to := fmt.Sprintf("%s/%d", m.To.Topic, m.To.Partition)
			if m.To.Offset >= 0 {
				to += fmt.Sprintf("@%d", m.To.Offset)
			}
			fmt.Fprintf(w, "  %s/%d@%d -> %s  %s\n", m.From.Topic, m.From.Partition, m.From.Offset, to, m.Reason)
		}
	}
	if n := min(show, len(r.Refused)); n > 0 {
		fmt.Fprintf(w, "first %d not re-drivable:\n", n)
		for _, x := range r.Refused[:n] {
			fmt.Fprintf(w, "  %s/%d@%d  %s: %s\n", x.At.Topic, x.At.Partition, x.At.Offset, cmp.Or(x.Reason, "-"), x.Why)
		}
	}
}

// counts renders " (a 1, b 2)", or "" for none.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func sortedKeys(m map[string]int) []string { return slices.Sorted(maps.Keys(m)) }
