package atleastonce

import (
	"testing"
	"time"
)

// The group session timeout is what decides how long a silent instance keeps
// its partitions; `--session-timeout` was once read by the exactly-once
// runtime only, and at-least-once silently kept sarama's 10 s.
func TestSaramaConfigTakesTheSessionTimeout(t *testing.T) {
	for _, tc := range []struct {
		name               string
		set                time.Duration
		session, heartbeat time.Duration
	}{
		{"unset keeps the 10s default", 0, 10 * time.Second, 3 * time.Second},
		{"3s", 3 * time.Second, 3 * time.Second, 600 * time.Millisecond},
		{"45s", 45 * time.Second, 45 * time.Second, 9 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := SaramaConfig(Config{Brokers: []string{"b:9092"}, StateDir: "s", CommitInterval: time.Second, SessionTimeout: tc.set})
			if got := sc.Consumer.Group.Session.Timeout; got != tc.session {
				t.Errorf("session timeout %v, want %v", got, tc.session)
			}
			if got := sc.Consumer.Group.Heartbeat.Interval; got != tc.heartbeat {
				t.Errorf("heartbeat interval %v, want %v", got, tc.heartbeat)
			}
			if err := sc.Validate(); err != nil {
				t.Errorf("sarama rejects the config: %v", err)
			}
		})
	}
}

func TestConfigValidateRejectsANegativeSessionTimeout(t *testing.T) {
	err := Config{Brokers: []string{"b:9092"}, StateDir: "s", CommitInterval: time.Second, SessionTimeout: -time.Second}.Validate()
	if err == nil {
		t.Fatal("a negative session timeout passed Validate")
	}
}
