// Package buildinfo tells which build of dedup is running, for `processor
// version` and the dedup_build_info metric: an operator comparing instances
// during an upgrade, or reading a bug report, needs the exact code, not the
// name of the binary.
package buildinfo

import (
	"cmp"
	"runtime"
	"runtime/debug"
	"strings"
)

// Module is dedup's module path. The build info of a program that embeds
// the library describes that program; dedup is one of its dependencies.
const Module = "github.com/dedupkit/dedup"

// Unknown stands for a value the build did not record.
const Unknown = "unknown"

// Set at link time (`make build` does), empty when not given:
//
//	go build -ldflags "-X github.com/dedupkit/dedup/internal/buildinfo.version=$(git describe --tags --always --dirty)"
//
// The Go toolchain records no release name such as git describe's and no
// build time, and it records no commit for a build in a linked git worktree
// (golang/go#58218: it takes only a .git directory for a repository) or
// with -buildvcs=false; commit is the full hash, "-dirty" when the tree had
// uncommitted changes.
var version, commit, buildTime string

// Info is one build of dedup.
type Info struct {
	// Version is the version given at link time, else the module version Go
	// recorded: "(devel)" for a build from a checkout without version
	// control information, a pseudo-version for one with it.
	Version string
	// Revision is the commit given at link time, else the one Go recorded
	// (vcs.revision) for a build in a dedup checkout; Modified says the tree
	// had uncommitted changes.
	Revision string
	Modified bool
	// CommitTime is the time of Revision (vcs.time), BuildTime the time of
	// the build when given at link time.
	CommitTime string
	BuildTime  string
	GoVersion  string
}

// Read describes the running program's build of dedup.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuild(linked{version: version, commit: commit, buildTime: buildTime}, bi)
}

// Commit is the revision with "-dirty" when the tree had uncommitted
// changes, as git describe --dirty marks it.
func (i Info) Commit() string {
	if i.Modified && i.Revision != Unknown {
		return i.Revision + "-dirty"
	}
	return i.Revision
}

// linked are the values given at link time.
type linked struct{ version, commit, buildTime string }

// fromBuild is Read apart from the process (bi is nil for a binary without
// build info), so that each kind of build can be tested.
func fromBuild(l linked, bi *debug.BuildInfo) Info {
	info := Info{Version: l.version, Revision: Unknown, CommitTime: Unknown, BuildTime: cmp.Or(l.buildTime, Unknown), GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if bi.Main.Path == Module {
			info.Version = cmp.Or(info.Version, bi.Main.Version)
			// The version control settings are the main module's: only
			// then are they dedup's.
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					info.Revision = s.Value
				case "vcs.modified":
					info.Modified = s.Value == "true"
				case "vcs.time":
					info.CommitTime = s.Value
				}
			}
		} else if info.Version == "" {
			info.Version = depVersion(bi.Deps)
		}
	}
	if l.commit != "" {
		rev, dirty := strings.CutSuffix(l.commit, "-dirty")
		if rev != info.Revision {
			// Go recorded another repository's commit (a worktree nested
			// in another checkout), or none: its time is not this one's.
			info.CommitTime = Unknown
		}
		info.Revision, info.Modified = rev, dirty
	}
	info.Version = cmp.Or(info.Version, Unknown)
	return info
}

// depVersion is dedup's version among a program's modules, "" when it is
// not one of them.
func depVersion(deps []*debug.Module) string {
	for _, d := range deps {
		if d.Path != Module {
			continue
		}
		if d.Replace == nil {
			return d.Version
		}
		// A replacement by a local directory has no version.
		return cmp.Or(d.Replace.Version, "(devel)")
	}
	return ""
}
