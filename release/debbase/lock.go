// Package debbase makes the agent image's base: a minimal glibc root file
// system from Debian packages pinned by a lock file kept in the repository.
// Every package is downloaded by its pool path, checked against the lock's
// size and SHA256, and extracted by mmdebstrap's extract variant (no
// maintainer scripts, so a foreign architecture needs no emulation).
package debbase

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Lock pins the base's Debian packages, per architecture.
type Lock struct {
	// Comment says what the file is and how to regenerate it.
	Comment string `json:"comment,omitempty"`
	// Sources are the archives the packages were resolved from, as apt
	// source lines without the "deb" and options, e.g.
	// "http://deb.debian.org/debian bookworm main".
	Sources []string `json:"sources"`
	// Roots are the packages asked for; Packages adds their dependencies.
	Roots []string `json:"roots"`
	// Architectures maps a Debian architecture (amd64, arm64) to its
	// packages, sorted by name.
	Architectures map[string][]Package `json:"architectures"`
}

// Package is one pinned .deb.
type Package struct {
	Name         string `json:"package"`
	Version      string `json:"version"`
	Architecture string `json:"architecture"`
	// Mirror is the archive root the pool path is under, e.g.
	// "http://deb.debian.org/debian-security".
	Mirror string `json:"mirror"`
	// Path is the pool path under Mirror, e.g.
	// "pool/main/g/glibc/libc6_2.36-9+deb12u14_arm64.deb".
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// String names the package as apt does: name=version (architecture).
func (p Package) String() string {
	return fmt.Sprintf("%s=%s (%s)", p.Name, p.Version, p.Architecture)
}

// URL is where the mirror serves the package.
func (p Package) URL() string {
	return strings.TrimSuffix(p.Mirror, "/") + "/" + p.Path
}

// ReadLock reads and checks the lock file at path.
func ReadLock(path string) (*Lock, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read base lock: %w", err)
	}
	l, err := ParseLock(data)
	if err != nil {
		return nil, nil, fmt.Errorf("base lock %s: %w", path, err)
	}
	return l, data, nil
}

// ParseLock decodes a lock file and checks that every package is complete.
func ParseLock(data []byte) (*Lock, error) {
	var l Lock
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if len(l.Architectures) == 0 {
		return nil, errors.New("no architectures")
	}
	for arch, pkgs := range l.Architectures {
		if len(pkgs) == 0 {
			return nil, fmt.Errorf("architecture %s has no packages", arch)
		}
		for _, p := range pkgs {
			if err := p.check(arch); err != nil {
				return nil, err
			}
		}
	}
	return &l, nil
}

// check reports a package entry that lacks a field or names another
// architecture than the one it is listed under.
func (p Package) check(arch string) error {
	sum, err := hex.DecodeString(p.SHA256)
	switch {
	case p.Name == "" || p.Version == "" || p.Mirror == "" || p.Path == "":
		return fmt.Errorf("architecture %s: incomplete entry %+v", arch, p)
	case p.Architecture != arch && p.Architecture != "all":
		return fmt.Errorf("%s is listed under architecture %s", p, arch)
	case err != nil || len(sum) != sha256.Size:
		return fmt.Errorf("%s: sha256 %q is not a SHA-256 in hex", p, p.SHA256)
	case p.Size <= 0:
		return fmt.Errorf("%s: size %d", p, p.Size)
	case strings.Contains(p.Path, "..") || strings.HasPrefix(p.Path, "/"):
		return fmt.Errorf("%s: pool path %q leaves the mirror", p, p.Path)
	}
	return nil
}

// Packages returns the pinned packages of arch.
func (l *Lock) Packages(arch string) ([]Package, error) {
	pkgs, ok := l.Architectures[arch]
	if !ok {
		return nil, fmt.Errorf("base lock pins no packages for architecture %s (it has %s); run make release-lock", arch, strings.Join(l.archNames(), ", "))
	}
	return pkgs, nil
}

func (l *Lock) archNames() []string {
	var names []string
	for a := range l.Architectures {
		names = append(names, a)
	}
	slices.Sort(names)
	return names
}

// Encode returns the lock file's bytes: indented JSON, packages sorted by
// name, ending in a newline.
func (l *Lock) Encode() ([]byte, error) {
	for _, pkgs := range l.Architectures {
		slices.SortFunc(pkgs, func(a, b Package) int { return strings.Compare(a.Name, b.Name) })
	}
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode base lock: %w", err)
	}
	return append(data, '\n'), nil
}

// Hash is the hex SHA-256 of a lock file's bytes, the key of cached bases.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
