package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set at link time with -ldflags -X (see the package comment); empty in a
// build that does not set them. They are the package's only variables.
var (
	version  string
	revision string
)

// Values reported when neither the linker nor the toolchain's build
// information says.
const (
	// Devel is the version of a build that was not stamped and whose
	// main module has no version (a build from a source tree).
	Devel = "devel"
	// Unknown is the revision of a build that was not stamped and that
	// the toolchain recorded no VCS revision for.
	Unknown = "unknown"
)

// Info is one build of carve.
type Info struct {
	// Version is the release, e.g. v1.2.3 (git describe for builds
	// between releases), or Devel.
	Version string `json:"version"`
	// Revision is the source revision (a git commit), with "-dirty" when
	// the tree had uncommitted changes, or Unknown.
	Revision string `json:"revision"`
	// GoVersion is the Go release that compiled the binary, e.g. go1.26.8.
	GoVersion string `json:"goVersion"`
}

// Get returns the running binary's build: the linker-stamped version and
// revision, else the toolchain's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, revision, bi)
}

// resolve picks the version and revision: the stamped ones when set, else
// bi's (nil when the binary carries none).
func resolve(stampedVersion, stampedRevision string, bi *debug.BuildInfo) Info {
	info := Info{Version: stampedVersion, Revision: stampedRevision, GoVersion: runtime.Version()}
	if info.Version == "" {
		info.Version = mainVersion(bi)
	}
	if info.Revision == "" {
		info.Revision = vcsRevision(bi)
	}
	return info
}

// mainVersion is the main module's version in bi, Devel when it has none
// ("(devel)" is what the toolchain records for a source tree it could not
// version).
func mainVersion(bi *debug.BuildInfo) string {
	if bi == nil || bi.Main.Version == "" || bi.Main.Version == "(devel)" {
		return Devel
	}
	return bi.Main.Version
}

// vcsRevision is the vcs.revision build setting in bi, with "-dirty" when
// vcs.modified is true; Unknown without one.
func vcsRevision(bi *debug.BuildInfo) string {
	if bi == nil {
		return Unknown
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case rev == "":
		return Unknown
	case modified == "true":
		return rev + "-dirty"
	}
	return rev
}

// String is the build on one line: "v1.2.3 (revision abc1234, go1.26.8)".
// A program prints its name before it: "carve-agent " + info.String().
func (i Info) String() string {
	return i.Version + " (revision " + i.Revision + ", " + i.GoVersion + ")"
}

// Line is the build on one line after the program's name, as --version
// prints it: "carve-agent v1.2.3 (revision abc1234, go1.26.8)".
func (i Info) Line(program string) string {
	return program + " " + i.String()
}
