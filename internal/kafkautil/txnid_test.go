package kafkautil

import "testing"

func TestMemberTxnID(t *testing.T) {
	for _, tt := range []struct {
		id   string
		want bool
	}{
		{"g-a-0", true},
		{"g-dedup-0-12", true}, // a StatefulSet pod name as the instance ID
		{"g-a-b-3", true},
		{"g-redrive", false},
		{"g-0", false}, // no instance ID
		{"g--0", false},
		{"g-a-", false},
		{"g-a-1x", false},
		{"h-a-0", false},
		{"gg-a-0", false},
	} {
		if got := MemberTxnID("g", tt.id); got != tt.want {
			t.Errorf("MemberTxnID(g, %q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestInstanceTxnID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"g-a-0", true},
		{"g-a-12", true},
		{"g-a-1-0", false}, // instance a-1's
		{"g-a-", false},
		{"g-a", false},
		{"g-ab-0", false},
		{"g-a-x", false},
	} {
		if got := InstanceTxnID("g-a", tc.id); got != tc.want {
			t.Errorf("InstanceTxnID(g-a, %q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}
