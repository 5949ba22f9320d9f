package buildinfo

import (
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuild(t *testing.T) {
	const rev, other = "ff8ccfa1943a340187a6eb668f7e0dfe86f67f92", "0123456789abcdef0123456789abcdef01234567"
	vcs := []debug.BuildSetting{
		{Key: "-compiler", Value: "gc"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: rev},
		{Key: "vcs.time", Value: "2026-03-01T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	dedupMain := debug.Module{Path: Module, Version: "v0.0.0-20260301100000-ff8ccfa1943a+dirty"}
	checkout := &debug.BuildInfo{GoVersion: "go1.26.8", Main: dedupMain, Settings: vcs}
	// Built in a linked worktree, or with -buildvcs=false: no vcs settings.
	noVCS := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module, Version: "(devel)"}}
	none := Info{Version: Unknown, Revision: Unknown, CommitTime: Unknown, BuildTime: Unknown, GoVersion: "go1.26.8"}
	with := func(f func(*Info)) Info {
		i := none
		f(&i)
		return i
	}
	tests := []struct {
		name       string
		linked     linked
		bi         *debug.BuildInfo
		want       Info
		wantCommit string
	}{
		{
			name: "no build info",
			want: with(func(i *Info) { i.GoVersion = runtime.Version() }), wantCommit: Unknown,
		},
		{
			name: "no build info, all given at link time", linked: linked{"v1.2.0", rev, "2026-03-02T08:00:00Z"},
			want: with(func(i *Info) {
				i.Version, i.Revision, i.BuildTime, i.GoVersion = "v1.2.0", rev, "2026-03-02T08:00:00Z", runtime.Version()
			}),
			wantCommit: rev,
		},
		{
			name: "checkout with version control, nothing given at link time", bi: checkout,
			want: with(func(i *Info) {
				i.Version, i.Revision, i.Modified, i.CommitTime = dedupMain.Version, rev, true, "2026-03-01T10:00:00Z"
			}),
			wantCommit: rev + "-dirty",
		},
		{
			name: "make build in a checkout: the link-time values win", bi: checkout,
			linked: linked{"v1.2.0-3-gff8ccfa-dirty", rev + "-dirty", "2026-03-02T08:00:00Z"},
			want: with(func(i *Info) {
				i.Version, i.Revision, i.Modified = "v1.2.0-3-gff8ccfa-dirty", rev, true
				i.CommitTime, i.BuildTime = "2026-03-01T10:00:00Z", "2026-03-02T08:00:00Z"
			}),
			wantCommit: rev + "-dirty",
		},
		{
			name: "make build in a linked worktree: Go recorded no commit", bi: noVCS,
			linked: linked{"ff8ccfa", rev, "2026-03-02T08:00:00Z"},
			want: with(func(i *Info) {
				i.Version, i.Revision, i.BuildTime = "ff8ccfa", rev, "2026-03-02T08:00:00Z"
			}),
			wantCommit: rev,
		},
		{
			name: "make build in a worktree nested in another checkout: Go recorded that one's commit", bi: checkout,
			linked:     linked{"ff8ccfa", other, ""},
			want:       with(func(i *Info) { i.Version, i.Revision = "ff8ccfa", other }),
			wantCommit: other,
		},
		{
			name: "make build without git: the module version", bi: noVCS,
			want: with(func(i *Info) { i.Version = "(devel)" }), wantCommit: Unknown,
		},
		{
			name: "clean checkout",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: dedupMain,
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}},
			want:       with(func(i *Info) { i.Version, i.Revision = dedupMain.Version, rev }),
			wantCommit: rev,
		},
		{
			name: "go install of a release",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module, Version: "v1.2.0", Sum: "h1:x"}},
			want: with(func(i *Info) { i.Version = "v1.2.0" }), wantCommit: Unknown,
		},
		{
			name: "embedded in another program: dedup's version, not the program's version control",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/app", Version: "(devel)"}, Settings: vcs,
				Deps: []*debug.Module{{Path: "github.com/IBM/sarama", Version: "v1.61.1"}, {Path: Module, Version: "v1.2.0"}}},
			want: with(func(i *Info) { i.Version = "v1.2.0" }), wantCommit: Unknown,
		},
		{
			name: "embedded, dedup replaced by a local directory",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/app"},
				Deps: []*debug.Module{{Path: Module, Version: "v1.2.0", Replace: &debug.Module{Path: "../dedup"}}}},
			want: with(func(i *Info) { i.Version = "(devel)" }), wantCommit: Unknown,
		},
		{
			name: "embedded, dedup replaced by a fork",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/app"},
				Deps: []*debug.Module{{Path: Module, Version: "v1.2.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.2.1"}}}},
			want: with(func(i *Info) { i.Version = "v1.2.1" }), wantCommit: Unknown,
		},
		{
			name: "a program without dedup among its modules",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/app", Version: "v3.0.0"}},
			want: none, wantCommit: Unknown,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fromBuild(tt.linked, tt.bi)
			if got != tt.want {
				t.Errorf("fromBuild = %+v\nwant        %+v", got, tt.want)
			}
			if c := got.Commit(); c != tt.wantCommit {
				t.Errorf("Commit() = %q, want %q", c, tt.wantCommit)
			}
		})
	}
}

// Module must be the path go.mod declares, or a build of dedup would be
// taken for a program embedding it.
func TestModuleIsGoModsPath(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	if first != "module "+Module {
		t.Errorf("go.mod starts with %q, want %q", first, "module "+Module)
	}
}

// A test binary is built from this module without link-time values.
func TestRead(t *testing.T) {
	if got := Read(); got.Version != "(devel)" || got.GoVersion != runtime.Version() {
		t.Errorf("Read() = %+v, want version (devel) and Go %s", got, runtime.Version())
	}
}
