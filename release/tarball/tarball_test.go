package tarball

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCreateReproducible: the same content with other times and modes on
// disk gives the same archive.
func TestCreateReproducible(t *testing.T) {
	var archives [][]byte
	for i, mode := range []os.FileMode{0o755, 0o775} {
		dir := t.TempDir()
		p := filepath.Join(dir, "bin", "tool")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(time.Duration(i) * time.Hour)
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "a.tar.gz")
		if err := Create(t.Context(), out, dir, []string{"bin"}, 1700000000, true); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, data)
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Errorf("archives of the same content differ")
	}
}
