package debbase

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRepositoryLock: the committed lock parses, pins both architectures
// with libc6, and is in Encode's canonical form.
func TestRepositoryLock(t *testing.T) {
	l, data, err := ReadLock("../base.lock.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		pkgs, err := l.Packages(arch)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range pkgs {
			names = append(names, p.Name)
		}
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " libc6 ") {
			t.Errorf("%s pins %v, no libc6", arch, names)
		}
	}
	again, err := l.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(data), string(again)); diff != "" {
		t.Errorf("lock is not as Encode writes it (-file +encoded):\n%s", diff)
	}
}

func TestParseLockRejects(t *testing.T) {
	ok := `{"package":"libc6","version":"1","architecture":"amd64","mirror":"http://m","path":"pool/x.deb","sha256":"` + strings.Repeat("ab", 32) + `","size":1}`
	for name, text := range map[string]string{
		"no architectures": `{"sources":[],"roots":[],"architectures":{}}`,
		"unknown field":    `{"architectures":{"amd64":[` + ok + `]},"extra":1}`,
		"wrong arch":       `{"architectures":{"arm64":[` + ok + `]}}`,
		"short sha":        `{"architectures":{"amd64":[` + strings.Replace(ok, "abab", "", 1) + `]}}`,
		"path escapes":     `{"architectures":{"amd64":[` + strings.Replace(ok, "pool/x.deb", "../x.deb", 1) + `]}}`,
		"no size":          `{"architectures":{"amd64":[` + strings.Replace(ok, `"size":1`, `"size":0`, 1) + `]}}`,
	} {
		if _, err := ParseLock([]byte(text)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if _, err := ParseLock([]byte(`{"architectures":{"amd64":[` + ok + `]}}`)); err != nil {
		t.Errorf("valid lock: %v", err)
	}
}

// TestFetch: a package is verified against the lock; a mirror that no
// longer has it gives ErrGone naming the package.
func TestFetch(t *testing.T) {
	body := []byte("a .deb")
	sum := sha256.Sum256(body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/pool/ok.deb" {
			_, _ = w.Write(body)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	good := Package{Name: "libc6", Version: "2.36-9", Architecture: "amd64", Mirror: srv.URL, Path: "pool/ok.deb",
		SHA256: hex.EncodeToString(sum[:]), Size: int64(len(body))}
	cache := t.TempDir()
	if _, err := Fetch(t.Context(), good, cache); err != nil {
		t.Fatalf("fetch: %v", err)
	}

	gone := good
	gone.Path, gone.SHA256 = "pool/old.deb", strings.Repeat("00", 32)
	_, err := Fetch(t.Context(), gone, cache)
	if !errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "libc6=2.36-9 (amd64)") || !strings.Contains(err.Error(), "make release-lock") {
		t.Errorf("fetch of a removed version: %v", err)
	}

	tampered := good
	tampered.SHA256 = strings.Repeat("11", 32)
	if _, err := Fetch(t.Context(), tampered, cache); err == nil || !strings.Contains(err.Error(), "the lock pins") {
		t.Errorf("fetch with another checksum: %v", err)
	}
}

func TestURIPackage(t *testing.T) {
	sources := []string{"http://deb.debian.org/debian bookworm main", "http://deb.debian.org/debian-security bookworm-security main"}
	line := "'http://deb.debian.org/debian-security/pool/updates/main/g/glibc/libc6_2.36-9%2bdeb12u14_arm64.deb' libc6_2.36-9+deb12u14_arm64.deb 2324660 MD5Sum:96654eb25919c6f15deb9848c0f06601\n"
	got, err := uriPackage(line, sources)
	if err != nil {
		t.Fatal(err)
	}
	want := Package{Name: "libc6", Mirror: "http://deb.debian.org/debian-security", Path: "pool/updates/main/g/glibc/libc6_2.36-9+deb12u14_arm64.deb"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := uriPackage("'http://elsewhere/pool/x.deb' x.deb 1 MD5Sum:0", sources); err == nil {
		t.Errorf("a URI under no source was accepted")
	}
}
