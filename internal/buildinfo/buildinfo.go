// Package buildinfo says what a binary was built from: the version the
// Makefile stamps (go build -ldflags "-X main.version=..."), the commit and
// the Go version, from the build's own record (runtime/debug).
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is what a binary was built from.
type Info struct {
	Version   string // stamped, or the module's version, or "dev"
	Commit    string // the VCS revision, "+dirty" if modified; "" if unknown
	GoVersion string
}

// Read returns the build's Info; version and commit are the stamped ones
// ("dev" and "" if none was): a commit not stamped is taken from Go's own
// record of the build, if it made one.
func Read(version, commit string) Info {
	info := Info{Version: version, Commit: commit, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	if (info.Version == "" || info.Version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit != "" {
		return info
	}
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && info.Commit != "" {
		info.Commit += "+dirty"
	}
	return info
}

// String is the version line: "sluice 1.2.3 (commit abc123, go1.26.8)".
func (i Info) String() string {
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("sluice %s (commit %s, %s)", i.Version, commit, i.GoVersion)
}
