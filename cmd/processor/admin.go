package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/groupadmin"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/tablefile"
	"github.com/dedupkit/dedup/processor"
)

// adminFlags are the flags the admin commands share; like `run`, each can
// come from PROCESSOR_<FLAG>.
type adminFlags struct {
	fs       *flag.FlagSet
	args     []string // positional arguments, wherever they stood
	brokers  []string
	security processor.Security
	group    string
	input    string
	stateDir string
}

func newAdminFlags(name string) *adminFlags {
	a := &adminFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	a.fs.Func("brokers", "comma-separated Kafka bootstrap brokers", func(s string) error { a.brokers = splitList(s); return nil })
	securityFlags(a.fs, &a.security)
	a.fs.StringVar(&a.group, "group", "", "consumer group")
	a.fs.StringVar(&a.input, "input", "", "the group's input topics, comma-separated")
	a.fs.StringVar(&a.stateDir, "state-dir", "./state", "the worker's state directory")
	return a
}

// parse reads the environment, then args, and checks the named flags.
func (a *adminFlags) parse(args []string, required ...string) error {
	// -h marks the flags the command requires.
	for _, r := range required {
		if f := a.fs.Lookup(r); !strings.HasSuffix(f.Usage, "(required)") {
			f.Usage += " (required)"
		}
	}
	var errs []error
	a.fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if err := a.fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", envName(f.Name), err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Go's flag package stops at the first positional argument; keep
	// parsing after it so `table get <id> --group g` works too.
	for rest := args; ; {
		if err := a.fs.Parse(rest); err != nil {
			return err
		}
		if a.fs.NArg() == 0 {
			break
		}
		a.args = append(a.args, a.fs.Arg(0))
		rest = a.fs.Args()[1:]
	}
	for _, r := range required {
		missing := a.fs.Lookup(r).Value.String() == ""
		if r == "brokers" {
			missing = len(a.brokers) == 0
		}
		if missing {
			errs = append(errs, fmt.Errorf("--%s: required (or %s)", r, envName(r)))
		}
	}
	return errors.Join(errs...)
}

func (a *adminFlags) connect() (sarama.Client, sarama.ClusterAdmin, error) {
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	if err := a.security.Apply(c); err != nil {
		return nil, nil, err
	}
	client, err := sarama.NewClient(a.brokers, c)
	if err != nil {
		return nil, nil, fmt.Errorf("--brokers %v: %w", a.brokers, err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, admin, nil
}

// runResetOffsets moves the group's offsets on each of its inputs for a
// replay. Every input takes the same target, so a replay of a group that
// reads several re-reads all of them; an input left out is named.
func runResetOffsets(args []string, out io.Writer) error {
	a := newAdminFlags("processor reset-offsets")
	to := a.fs.String("to", "", "earliest | latest | datetime=<RFC 3339> | offset=<n> (required)")
	dryRun := a.fs.Bool("dry-run", false, "print current and new offsets, change nothing")
	if err := a.parse(args, "brokers", "group", "input", "to"); err != nil {
		return err
	}
	if len(a.args) > 0 {
		return fmt.Errorf("unexpected arguments %q", a.args)
	}
	inputs, err := a.inputs()
	if err != nil {
		return err
	}
	target, err := groupadmin.ParseTarget(*to)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	client, admin, err := a.connect()
	if err != nil {
		return err
	}
	defer admin.Close()
	// Offsets are read once no transaction of the group holds them: a worker
	// that died with one open holds them until the transaction timeout.
	ctx, cancel := context.WithTimeout(context.Background(), offsetsWait)
	defer cancel()
	plans, err := planMoves(ctx, client, a.group, inputs, target)
	if err != nil {
		return err
	}
	names := strings.Join(inputs, ", ")
	// A refusal comes first, and a table of offsets that were not applied
	// says so on its header line and in its column: it must never read as
	// a reset that ran.
	active := groupadmin.CheckInactive(admin, a.group)
	if *dryRun {
		fmt.Fprintf(out, "dry run: nothing changed; group %s, offsets on %s NOT APPLIED:\n", a.group, names)
		printMoves(out, plans, false)
		if active != nil {
			fmt.Fprintf(out, "a reset now would be refused: %v\n", active)
		}
		return noteOtherTopics(ctx, out, client, a.group, inputs)
	}
	if active != nil {
		fmt.Fprintf(out, "refused: %v\nnothing changed; group %s, offsets on %s NOT APPLIED:\n", active, a.group, names)
		printMoves(out, plans, false)
		return active
	}
	for _, pl := range plans {
		if err := groupadmin.Apply(client, a.group, pl.topic, pl.moves); err != nil {
			return fmt.Errorf("%s: %w", pl.topic, err)
		}
	}
	after, err := planMoves(ctx, client, a.group, inputs, target)
	if err != nil {
		return err
	}
	for i, pl := range after {
		for j, mv := range pl.moves {
			if want := plans[i].moves[j].New; mv.Current != want {
				return fmt.Errorf("%s partition %d: committed offset is %d after the reset, want %d", pl.topic, mv.Partition, mv.Current, want)
			}
		}
	}
	fmt.Fprintf(out, "group %s moved on %s, applied:\n", a.group, names)
	printMoves(out, plans, true)
	fmt.Fprintln(out, "already processed events will be skipped by the table")
	return noteOtherTopics(ctx, out, client, a.group, inputs)
}

// inputs is --input as a list of topics, refused with an empty element or
// a topic named twice, as `processor run` refuses them.
func (a *adminFlags) inputs() ([]string, error) {
	inputs := splitInputs(a.input)
	if len(inputs) == 0 {
		return nil, fmt.Errorf("--input: required (or %s)", envName("input"))
	}
	for i, in := range inputs {
		if in == "" {
			return nil, fmt.Errorf("--input: %q names an empty topic", a.input)
		}
		if slices.Contains(inputs[:i], in) {
			return nil, fmt.Errorf("--input: %q is named twice", in)
		}
	}
	return inputs, nil
}

// topicMoves are the planned moves on one input.
type topicMoves struct {
	topic string
	moves []groupadmin.Move
}

// offsetsWait bounds how long reset-offsets waits for a transaction of the
// group that holds its offsets to end.
const offsetsWait = 2 * time.Minute

func planMoves(ctx context.Context, client sarama.Client, group string, inputs []string, to groupadmin.Target) ([]topicMoves, error) {
	plans := make([]topicMoves, 0, len(inputs))
	for _, in := range inputs {
		moves, err := groupadmin.Plan(ctx, client, group, in, to)
		if err != nil {
			return nil, err
		}
		plans = append(plans, topicMoves{in, moves})
	}
	return plans, nil
}

// noteOtherTopics names the topics, other than the inputs and the group's
// loop topic, on which the group has committed offsets: most likely an
// input of the worker that --input left out, which the replay does not
// re-read.
func noteOtherTopics(ctx context.Context, out io.Writer, client sarama.Client, group string, inputs []string) error {
	committed, err := groupadmin.CommittedTopics(ctx, client, group)
	if err != nil {
		return err
	}
	var others []string
	for _, topic := range committed {
		if !slices.Contains(inputs, topic) && topic != group+"-loop" {
			others = append(others, topic)
		}
	}
	if len(others) > 0 {
		fmt.Fprintf(out, "note: group %s also has committed offsets on %s, not in --input: left where they are\n",
			group, strings.Join(others, ", "))
	}
	return nil
}

// printMoves prints the offsets table; its NEW column says whether the
// offsets were applied.
func printMoves(out io.Writer, plans []topicMoves, applied bool) {
	newCol := "NEW (NOT APPLIED)"
	if applied {
		newCol = "NEW (APPLIED)"
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TOPIC\tPARTITION\tCURRENT\t%s\n", newCol)
	for _, pl := range plans {
		for _, mv := range pl.moves {
			cur := fmt.Sprint(mv.Current)
			if mv.Current < 0 {
				cur = "-"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", pl.topic, mv.Partition, cur, mv.New)
		}
	}
	tw.Flush()
}

// runResetState deletes the group's table topic and its local state, for a
// replay from scratch.
func runResetState(args []string, out io.Writer) error {
	a := newAdminFlags("processor reset-state")
	yes := a.fs.Bool("yes", false, "really delete the table topic and the local state")
	if err := a.parse(args, "brokers", "group"); err != nil {
		return err
	}
	table := a.group + "-table"
	local, _ := filepath.Glob(filepath.Join(a.stateDir, table+".*"))
	if !*yes {
		fmt.Fprintf(out, "would delete topic %s and %d local table directories under %s\n", table, len(local), a.stateDir)
		return errors.New("--yes: required to delete the table (every event is then processed again on replay)")
	}
	_, admin, err := a.connect()
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := groupadmin.CheckInactive(admin, a.group); err != nil {
		return err
	}
	if err := admin.DeleteTopic(table); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return fmt.Errorf("delete topic %s: %w", table, err)
	}
	for _, dir := range local {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "deleted topic %s and %d local table directories; reset the offsets (e.g. --to earliest) to replay from scratch\n", table, len(local))
	return nil
}

// runTable inspects the local table of a stopped worker:
// `table get <id> [--source S]` or `table stats`.
func runTable(args []string, out io.Writer) error {
	const tableUsage = "usage: processor table get <id> | stats --group G --state-dir D"
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintln(out, tableUsage+"\n\nprocessor table get -h and processor table stats -h list the flags.")
		return flag.ErrHelp
	}
	if len(args) == 0 || (args[0] != "get" && args[0] != "stats") {
		return errors.New(tableUsage)
	}
	sub := args[0]
	a := newAdminFlags("processor table " + sub)
	source := a.fs.String("source", "", "CloudEvents ce_source, when IDs come from headers")
	if err := a.parse(args[1:], "group", "state-dir"); err != nil {
		return err
	}
	table := a.group + "-table"
	if sub == "stats" {
		stats, err := tablefile.Stats(a.stateDir, table)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "PARTITION\tENTRIES\tCHANGELOG-OFFSET\tNEXT-EXPIRY\n")
		var total int64
		for _, s := range stats {
			exp := "-"
			if s.NextExpiry > 0 {
				exp = time.Unix(0, s.NextExpiry).UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\n", s.Partition, s.Entries, s.ChangelogNext, exp)
			total += s.Entries
		}
		fmt.Fprintf(tw, "total\t%d\t\t\n", total)
		return tw.Flush()
	}
	if len(a.args) != 1 {
		return errors.New("usage: processor table get <id> --group G --state-dir D")
	}
	id := a.args[0]
	key := id
	if *source != "" {
		key = *source + "\x00" + id
	}
	l, err := tablefile.Get(a.stateDir, table, key)
	if err != nil {
		return err
	}
	ans := tablefile.Answer{ID: id, OwnedPartitions: l.Owned}
	if l.Found {
		if ans, err = tablefile.Found(l); err != nil {
			return err
		}
		ans.ID = id
	} else {
		ans.Note = "not in the local table"
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(ans); err != nil {
		return err
	}
	if !l.Found {
		return fmt.Errorf("%q: %w", id, errNotSeen)
	}
	return nil
}

var errNotSeen = errors.New("not seen")
