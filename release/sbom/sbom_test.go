package sbom

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/carve-dev/carve/release/debbase"
)

func testLock() *debbase.Lock {
	return &debbase.Lock{
		Sources: []string{"http://deb.debian.org/debian bookworm main"},
		Architectures: map[string][]debbase.Package{"arm64": {{
			Name: "libc6", Version: "2.36-9+deb12u14", Architecture: "arm64", Mirror: "http://deb.debian.org/debian",
			Path: "pool/main/g/glibc/libc6_2.36-9+deb12u14_arm64.deb", SHA256: strings.Repeat("ab", 32), Size: 1,
		}}},
	}
}

// TestImage: the image SBOM lists the Debian packages as pkg:deb purls and
// the binaries with their hashes, and is the same when written again.
func TestImage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "carve-agent")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	in := ImageInput{
		Repository: "ghcr.io/carve-dev/carve-agent", Version: "v1.2.3", Digest: "sha256:" + strings.Repeat("cd", 32),
		OS: "linux", Arch: "arm64", Lock: testLock(), Created: time.Unix(1700000000, 0), Tool: Tool{"carve-release", "v1.2.3"},
		Binaries: []ImageBinary{{Path: "/usr/local/bin/carve-agent", File: bin, SBOM: "carve-agent_v1.2.3_linux_arm64.cdx.json"}},
	}
	a, err := Image(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Image(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("two SBOMs of the same image differ")
	}
	for _, want := range []string{
		`"purl": "pkg:deb/debian/libc6@2.36-9%2Bdeb12u14?arch=arm64&distro=debian-bookworm"`,
		`"timestamp": "2023-11-14T22:13:20Z"`,
		`"serialNumber": "urn:uuid:`,
		`"url": "carve-agent_v1.2.3_linux_arm64.cdx.json"`,
	} {
		if !strings.Contains(string(a), want) {
			t.Errorf("image SBOM lacks %s:\n%s", want, a)
		}
	}
}

// TestBinary: a Go binary's SBOM (this test binary's) names its
// main module at the version given, and no time but the one given.
func TestBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := Binary(exe, "sbom.test", "v1.2.3", time.Unix(1700000000, 0), Tool{"carve-release", "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		SerialNumber string
		Metadata     struct {
			Timestamp string
			Component struct{ Name, Version string }
		}
	}
	if err := json.Unmarshal(data, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.Metadata.Timestamp != "2023-11-14T22:13:20Z" || bom.Metadata.Component.Version != "v1.2.3" || bom.Metadata.Component.Name != "github.com/carve-dev/carve/release" || bom.SerialNumber == "" {
		t.Errorf("binary SBOM: %+v", bom)
	}
}
