package debbase

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Keyring is the keyring apt checks the archives' signatures with when it
// resolves a new lock (Debian's debian-archive-keyring package).
const Keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// Resolve pins the newest versions of roots and their dependencies for each
// architecture, as apt resolves them from sources (checked against Keyring).
// The package lists go to a temporary directory; nothing is installed.
func Resolve(ctx context.Context, sources, roots, archs []string) (*Lock, error) {
	l := &Lock{
		Comment:       "Debian packages of carve-agent's image base, pinned. Written by `make release-lock` (carve-release lock); see docs/release.md.",
		Sources:       sources,
		Roots:         roots,
		Architectures: map[string][]Package{},
	}
	for _, arch := range archs {
		pkgs, err := resolveArch(ctx, sources, roots, arch)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", arch, err)
		}
		l.Architectures[arch] = pkgs
	}
	return l, nil
}

// resolveArch runs apt in a private state directory for one architecture.
func resolveArch(ctx context.Context, sources, roots []string, arch string) ([]Package, error) {
	dir, err := os.MkdirTemp("", "carve-release-apt-")
	if err != nil {
		return nil, fmt.Errorf("apt state directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	apt, err := newAptEnv(dir, sources, arch)
	if err != nil {
		return nil, err
	}
	if _, err := apt.run(ctx, "apt-get", "update", "-q"); err != nil {
		return nil, err
	}
	out, err := apt.run(ctx, "apt-get", append([]string{"install", "--print-uris", "-qq"}, roots...)...)
	if err != nil {
		return nil, err
	}
	var pkgs []Package
	for line := range strings.Lines(string(out)) {
		p, err := uriPackage(line, sources)
		if err != nil {
			return nil, err
		}
		if err := apt.complete(ctx, &p, arch); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("apt resolved no packages for %s", strings.Join(roots, " "))
	}
	return pkgs, nil
}

// aptEnv is apt configured to use only a private directory.
type aptEnv struct{ opts []string }

func newAptEnv(dir string, sources []string, arch string) (*aptEnv, error) {
	var list strings.Builder
	for _, s := range sources {
		fmt.Fprintf(&list, "deb [arch=%s signed-by=%s] %s\n", arch, Keyring, s)
	}
	for _, d := range []string{"lists/partial", "archives/partial", "apt.conf.d", "preferences.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("apt state directory: %w", err)
		}
	}
	files := map[string]string{"sources.list": list.String(), "status": ""}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return nil, fmt.Errorf("apt state directory: %w", err)
		}
	}
	set := func(k, v string) string { return "-o" + k + "=" + v }
	return &aptEnv{opts: []string{
		set("Dir::State", dir), set("Dir::State::Lists", filepath.Join(dir, "lists")),
		set("Dir::State::status", filepath.Join(dir, "status")),
		set("Dir::Cache", dir), set("Dir::Cache::archives", filepath.Join(dir, "archives")),
		set("Dir::Etc::SourceList", filepath.Join(dir, "sources.list")), set("Dir::Etc::SourceParts", "-"),
		set("Dir::Etc::Parts", filepath.Join(dir, "apt.conf.d")), set("Dir::Etc::Preferences", "/dev/null"),
		set("Dir::Etc::PreferencesParts", filepath.Join(dir, "preferences.d")),
		set("APT::Architecture", arch), set("APT::Architectures", arch),
		set("APT::Install-Recommends", "false"), set("APT::Sandbox::User", "root"),
		set("Debug::NoLocking", "true"),
	}}, nil
}

func (a *aptEnv) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, prog, append(slices.Clone(a.opts), args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// uriPackage reads one line of apt-get --print-uris,
// 'URL' FILE SIZE HASH, into a package with its mirror and pool path.
func uriPackage(line string, sources []string) (Package, error) {
	f := strings.Fields(line)
	if len(f) < 3 || !strings.HasPrefix(f[0], "'") || !strings.HasSuffix(f[0], "'") {
		return Package{}, fmt.Errorf("apt-get --print-uris: unexpected line %q", line)
	}
	u, err := url.PathUnescape(strings.Trim(f[0], "'"))
	if err != nil {
		return Package{}, fmt.Errorf("apt-get --print-uris: %q: %w", f[0], err)
	}
	for _, s := range sources {
		mirror := strings.TrimSuffix(strings.Fields(s)[0], "/")
		if path, ok := strings.CutPrefix(u, mirror+"/"); ok {
			name, _, _ := strings.Cut(filepath.Base(path), "_")
			return Package{Name: name, Mirror: mirror, Path: path}, nil
		}
	}
	return Package{}, fmt.Errorf("apt-get --print-uris: %s is under none of the sources", u)
}

// complete fills in version, architecture, size and SHA256 of p from the
// archive's (signed) package index: the entry whose Filename is p's path.
func (a *aptEnv) complete(ctx context.Context, p *Package, arch string) error {
	out, err := a.run(ctx, "apt-cache", "show", p.Name+":"+arch)
	if err != nil {
		return err
	}
	for stanza := range strings.SplitSeq(string(out), "\n\n") {
		fields := controlFields(stanza)
		if fields["Filename"] != p.Path {
			continue
		}
		p.Version, p.Architecture, p.SHA256 = fields["Version"], fields["Architecture"], fields["SHA256"]
		p.Size, err = strconv.ParseInt(fields["Size"], 10, 64)
		if err != nil {
			return fmt.Errorf("apt-cache show %s: size: %w", p.Name, err)
		}
		return p.check(arch)
	}
	return fmt.Errorf("apt-cache show %s: no entry with Filename %s", p.Name, p.Path)
}

// controlFields reads the single-line fields of a Debian control stanza.
func controlFields(stanza string) map[string]string {
	fields := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(stanza))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, " ") {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields
}
