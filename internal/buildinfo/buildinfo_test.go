package buildinfo

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// vcs returns build information of a main module at version with the
// given VCS settings (key=value).
func vcs(version string, settings ...string) *debug.BuildInfo {
	bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/carve-dev/carve", Version: version}}
	for _, s := range settings {
		k, v, _ := strings.Cut(s, "=")
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: k, Value: v})
	}
	return bi
}

// The stamped version and revision win; each falls back to the
// toolchain's record on its own, then to devel and unknown.
func TestResolve(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name              string
		version, revision string
		bi                *debug.BuildInfo
		want              Info
	}{
		{"stamped", "v1.2.3", sha, vcs("v1.0.0", "vcs.revision=ffff", "vcs.modified=true"), Info{Version: "v1.2.3", Revision: sha}},
		{"no build info", "", "", nil, Info{Version: Devel, Revision: Unknown}},
		{"source tree", "", "", vcs("(devel)"), Info{Version: Devel, Revision: Unknown}},
		{"empty main version", "", "", vcs(""), Info{Version: Devel, Revision: Unknown}},
		{"go install of a tag", "", "", vcs("v1.4.0"), Info{Version: "v1.4.0", Revision: Unknown}},
		{"clean checkout", "", "", vcs("v0.0.0-20260101000000-0123456789ab", "vcs.revision="+sha, "vcs.modified=false"),
			Info{Version: "v0.0.0-20260101000000-0123456789ab", Revision: sha}},
		{"dirty checkout", "", "", vcs("(devel)", "vcs=git", "vcs.revision="+sha, "vcs.modified=true"),
			Info{Version: Devel, Revision: sha + "-dirty"}},
		{"modified without a revision", "", "", vcs("(devel)", "vcs.modified=true"), Info{Version: Devel, Revision: Unknown}},
		{"version stamped, revision from VCS", "v1.2.3", "", vcs("(devel)", "vcs.revision="+sha),
			Info{Version: "v1.2.3", Revision: sha}},
		{"revision stamped, version from the module", "", sha, vcs("v1.4.0", "vcs.revision=ffff"),
			Info{Version: "v1.4.0", Revision: sha}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.GoVersion = runtime.Version()
			if diff := cmp.Diff(tt.want, resolve(tt.version, tt.revision, tt.bi)); diff != "" {
				t.Errorf("resolve (-want +got):\n%s", diff)
			}
		})
	}
}

func TestString(t *testing.T) {
	i := Info{Version: "v1.2.3", Revision: "abc1234", GoVersion: "go1.26.8"}
	if got, want := i.String(), "v1.2.3 (revision abc1234, go1.26.8)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := i.Line("carve-agent"), "carve-agent v1.2.3 (revision abc1234, go1.26.8)"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
}

// A test binary is not stamped: Get falls back, and always names the Go
// release.
func TestGetUnstamped(t *testing.T) {
	got := Get()
	if got.Version == "" || got.Revision == "" {
		t.Errorf("Get() = %+v: an empty version or revision", got)
	}
	if got.GoVersion != runtime.Version() {
		t.Errorf("GoVersion %q, want %q", got.GoVersion, runtime.Version())
	}
}

// The release build's -ldflags -X names reach the variables: a program
// linked with them prints the stamped version and revision.
func TestLinkerStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	const pkg = "github.com/carve-dev/carve/internal/buildinfo"
	bin := filepath.Join(t.TempDir(), "printversion")
	build := exec.Command("go", "build", "-trimpath", "-o", bin,
		"-ldflags", "-X "+pkg+".version=v9.8.7 -X "+pkg+".revision=feedface",
		"./testdata/printversion")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run %s: %v", bin, err)
	}
	want := "printversion v9.8.7 (revision feedface, " + runtime.Version() + ")\n"
	if got := string(out); got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}
