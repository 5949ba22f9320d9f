package redrive

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/processor"
)

func TestValidate(t *testing.T) {
	ok := Config{Brokers: []string{"127.0.0.1:9092"}, Group: "g"}
	for _, tt := range []struct {
		name string
		edit func(*Config)
		want string // "" valid, else the flag the error names
	}{
		{"defaults", func(*Config) {}, ""},
		{"every filter", func(c *Config) {
			c.Reasons, c.From, c.To = []string{"handler-error"}, t0, t0.Add(time.Hour)
			c.Partitions, c.FromOffset, c.ToOffset, c.Limit, c.DryRun = []int32{0, 2}, 10, 20, 5, true
		}, ""},
		{"no brokers", func(c *Config) { c.Brokers = nil }, "--brokers"},
		{"broker without port", func(c *Config) { c.Brokers = []string{"kafka"} }, "--brokers"},
		{"no group", func(c *Config) { c.Group = "" }, "--group"},
		{"target is the dead-letter topic", func(c *Config) { c.Target = "g-dlq" }, "--target"},
		{"target is the loop topic", func(c *Config) { c.Target = "g-loop" }, "--target"},
		{"target is the table topic", func(c *Config) { c.Target = "g-table" }, "--target"},
		{"target is the state topic", func(c *Config) { c.Target = "g-redrive" }, "--target"},
		{"state topic is the dead-letter topic", func(c *Config) { c.StateTopic = "g-dlq" }, "--state-topic"},
		{"state topic shaped like a worker's transactional ID", func(c *Config) { c.StateTopic = "g-redrive-2" }, "--state-topic"},
		{"state topic of another shape", func(c *Config) { c.StateTopic = "g-redrive-b" }, ""},
		{"empty reason", func(c *Config) { c.Reasons = []string{"handler-error", ""} }, "--reason"},
		{"to not after from", func(c *Config) { c.From, c.To = t0, t0 }, "--to"},
		{"negative partition", func(c *Config) { c.Partitions = []int32{-1} }, "--partition"},
		{"negative from offset", func(c *Config) { c.FromOffset = -1 }, "--from-offset"},
		{"negative to offset", func(c *Config) { c.ToOffset = -1 }, "--to-offset"},
		{"to offset not after from", func(c *Config) { c.FromOffset, c.ToOffset = 5, 5 }, "--to-offset"},
		{"negative limit", func(c *Config) { c.Limit = -1 }, "--limit"},
		{"SASL without user", func(c *Config) { c.Security.SASL.Mechanism = processor.SASLPlain }, "--sasl-user"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && err == nil:
				t.Errorf("accepted, want an error naming %s", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want+":"):
				t.Errorf("error %q does not name %s", err, tt.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c := Config{Group: "g"}.withDefaults()
	if c.DLQ != "g-dlq" || c.StateTopic != "g-redrive" || c.Replication != -1 || c.BatchSize != 500 || c.Logger == nil {
		t.Errorf("defaults %+v", c)
	}
	c = Config{Group: "g", DLQ: "shared-dlq", StateTopic: "s"}.withDefaults()
	if c.DLQ != "shared-dlq" || c.StateTopic != "s" {
		t.Errorf("given topics replaced: %+v", c)
	}
}

func TestReportPrint(t *testing.T) {
	for _, tt := range []struct {
		name   string
		dryRun bool
		want   []string
	}{
		{"dry run", true, []string{"dry run: nothing written; dead-letter topic g-dlq\n", "would re-drive:     1 (handler-error 1)",
			"  1 of them failed again after an earlier re-drive", "first 1 of 1 it would move:\n  g-dlq/0@7 -> orders/2  handler-error"}},
		{"run", false, []string{"dead-letter topic g-dlq\n", "re-driven:          1 (handler-error 1)",
			"first 1 of 1 moved:\n  g-dlq/0@7 -> orders/2@99  handler-error"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newReport(Config{DLQ: "g-dlq", DryRun: tt.dryRun})
			r.Scanned, r.Matched = 4, 2
			r.Skipped[FilterReason] = 2
			off := int64(99)
			if tt.dryRun {
				off = -1
			}
			r.moved(Move{From: dedup.Position{Topic: "g-dlq", Offset: 7}, To: dedup.Position{Topic: "orders", Partition: 2, Offset: off}, Reason: "handler-error"}, true)
			cut := letter("record-too-large", dedup.HeaderDLQOriginalSize, "9")
			r.refuse(&cut, WhyCut)
			var b bytes.Buffer
			r.Print(&b, 20)
			out := b.String()
			want := append(tt.want, "skipped by filter:  2 (reason 2)", "not re-drivable:    1\n  1  "+WhyCut,
				"g-dlq/0@7  record-too-large: "+WhyCut)
			if !strings.HasPrefix(out, tt.want[0]) {
				t.Errorf("first line of\n%s\nis not %q", out, tt.want[0])
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("report\n%s\nlacks %q", out, w)
				}
			}
		})
	}
}
