package processor

import (
	"slices"
	"testing"
)

func TestDeadOf(t *testing.T) {
	tests := []struct {
		name       string
		live, open []string
		want       []string
	}{
		{"nothing open", []string{"g-a-0"}, nil, nil},
		{"a live member's transaction", []string{"g-a-0", "g-b-0"}, []string{"g-a-0"}, nil},
		{"a dead member's transaction", []string{"g-a-0"}, []string{"g-b-0", "g-a-0"}, []string{"g-b-0"}},
		{"every thread of a dead instance", []string{"g-a-0"}, []string{"g-b-1", "g-b-0"}, []string{"g-b-0", "g-b-1"}},
		{"listed by two brokers", nil, []string{"g-b-0", "g-b-0"}, []string{"g-b-0"}},
		{"another group's", []string{"g-a-0"}, []string{"h-b-0", "gx-b-0"}, nil},
		{"the re-drive's", []string{"g-a-0"}, []string{"g-redrive"}, nil},
		{"not a member's shape", []string{"g-a-0"}, []string{"g-tool"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := deadOf("g", tt.live, tt.open); !slices.Equal(got, tt.want) {
				t.Fatalf("deadOf(g, %v, %v) = %v, want %v", tt.live, tt.open, got, tt.want)
			}
		})
	}
}
