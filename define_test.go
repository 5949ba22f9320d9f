package dedup

import (
	"slices"
	"strings"
	"testing"
)

func TestDefineInputs(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		want []string // the inputs; nil: an error
		errs []string // in the error
	}{
		{"one input", []Option{Input("a")}, []string{"a"}, nil},
		{"several in one call", []Option{Input("a", "b")}, []string{"a", "b"}, nil},
		{"several calls append", []Option{Input("a"), Input("b", "c")}, []string{"a", "b", "c"}, nil},
		{"none", nil, nil, []string{"no input topic"}},
		{"Input() with no topic", []Option{Input()}, nil, []string{"no input topic"}},
		{"an empty name", []Option{Input("a", "")}, nil, []string{"an input topic is empty"}},
		{"named twice", []Option{Input("a", "b"), Input("a")}, nil, []string{`input topic "a" is named twice`}},
		{"also an output", []Option{Input("a", "out")}, nil, []string{`input topic "out" is also an output`}},
		{"also the dead-letter topic", []Option{Input("a", "g-dlq")}, nil,
			[]string{`input topic "g-dlq" is also the dead-letter topic`}},
		{"also a named dead-letter topic", []Option{Input("a", "b"), DeadLetter("b")}, nil,
			[]string{`input topic "b" is also the dead-letter topic`}},
		{"the table topic", []Option{Input("a", "g-table")}, nil, []string{`input topic "g-table" is the group's own table or loop topic`}},
		{"the loop topic", []Option{Input("g-loop")}, nil, []string{`input topic "g-loop" is the group's own table or loop topic`}},
		{"every wrong input named", []Option{Input("a", "a", "g-loop", "")}, nil,
			[]string{`"a" is named twice`, `"g-loop" is the group's own`, "an input topic is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			top, err := Define("g", append(tt.opts, Output("out"))...)
			if tt.want != nil {
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(top.Inputs, tt.want) {
					t.Fatalf("inputs %q, want %q", top.Inputs, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("defined with inputs %q, want an error", top.Inputs)
			}
			for _, w := range tt.errs {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// Validate checks a Topology built without Define too, as the runtimes
// and tests build them.
func TestValidateInputs(t *testing.T) {
	valid := func() *Topology {
		top, err := Define("g", Input("a", "b"), Output("out"))
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	tests := []struct {
		name   string
		change func(*Topology)
		want   string // in the error; "": valid
	}{
		{"as defined", func(*Topology) {}, ""},
		{"nil inputs", func(top *Topology) { top.Inputs = nil }, "no input topic"},
		{"duplicate", func(top *Topology) { top.Inputs = []string{"a", "b", "b"} }, `input topic "b" is named twice`},
		{"output among the inputs", func(top *Topology) { top.Outputs = []string{"b"} }, `input topic "b" is also an output`},
		{"dead-letter topic among the inputs", func(top *Topology) { top.DLQ = "a" }, `input topic "a" is also the dead-letter topic`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			top := valid()
			tt.change(top)
			err := top.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one saying %q", err, tt.want)
			}
		})
	}
}
