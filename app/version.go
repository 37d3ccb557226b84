package app

import (
	"runtime/debug"
	"strings"
)

// BuildInfo says which talkgraph this is: the module version (or "devel" for a build of a
// checkout), the commit it was built from when known, and the Go version.
type BuildInfo struct {
	Version, Revision, GoVersion string
	Modified                     bool // built from a checkout with uncommitted changes
}

// Build returns the running binary's BuildInfo.
func Build() BuildInfo {
	b := BuildInfo{Version: "devel"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = info.GoVersion
	if v := info.Main.Version; v != "" && v != "(devel)" {
		b.Version = v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the one line -version prints.
func (b BuildInfo) String() string {
	parts := []string{"talkgraph", b.Version}
	if b.Revision != "" {
		rev := b.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if b.Modified {
			rev += "+modified"
		}
		parts = append(parts, rev)
	}
	if b.GoVersion != "" {
		parts = append(parts, b.GoVersion)
	}
	return strings.Join(parts, " ")
}
