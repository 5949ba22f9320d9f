package contenders

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestKStreamsArgs(t *testing.T) {
	base := Config{Kind: KStreams, Brokers: []string{"a:1", "b:2"}, Input: "in", Output: "out", Group: "g",
		StateDir: "/s", CommitInterval: 100 * time.Millisecond}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string // option pairs that must be there
		not  []string // options that must not be there
	}{
		{"default rekey is the repartition mode", func(*Config) {},
			[]string{"--mode repartition", "--commit-interval-ms 100", "--threads 1", "--brokers a:1,b:2", "--application-id g"},
			[]string{"--group-instance-id", "--standby-replicas", "--session-timeout-ms"}},
		{"rekey never is the local mode", func(c *Config) { c.Rekey = "never" }, []string{"--mode local"}, nil},
		{"rekey always", func(c *Config) { c.Rekey = "always" }, []string{"--mode repartition"}, nil},
		{"options", func(c *Config) {
			c.Threads, c.CommitInterval, c.SessionTimeout, c.StandbyReplicas, c.InstanceID = 2, time.Second, 10*time.Second, 1, "w-0"
		}, []string{"--threads 2", "--commit-interval-ms 1000", "--session-timeout-ms 10000", "--standby-replicas 1",
			"--group-instance-id w-0"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.edit(&cfg)
			args := kstreamsArgs(cfg, "/x.jar")
			if !slices.Equal(args[:len(KStreamsJVMFlags)+3], append(append([]string{"java"}, KStreamsJVMFlags...), "-jar", "/x.jar")) {
				t.Errorf("JVM part: %v", args)
			}
			line := " " + strings.Join(args, " ") + " "
			for _, w := range tc.want {
				if !strings.Contains(line, " "+w+" ") {
					t.Errorf("%q missing in %s", w, line)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(line, " "+n+" ") {
					t.Errorf("%q unexpected in %s", n, line)
				}
			}
		})
	}
}

func TestJarStale(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		name  string
		jar   bool
		touch string // a file made newer than the jar
		want  bool
	}{
		{"no jar", false, "", true},
		{"jar newer than its sources", true, "", false},
		{"a source newer", true, "src/main/java/A.java", true},
		{"the pom newer", true, "pom.xml", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			jar := filepath.Join(dir, kstreamsJar)
			for _, f := range []string{"pom.xml", "src/main/java/A.java"} {
				write(t, filepath.Join(dir, f), old)
			}
			if tc.jar {
				write(t, jar, old.Add(time.Minute))
			}
			if tc.touch != "" {
				write(t, filepath.Join(dir, tc.touch), old.Add(2*time.Minute))
			}
			got, err := jarStale(dir, jar)
			if err != nil || got != tc.want {
				t.Errorf("jarStale = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func write(t *testing.T, path string, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}
