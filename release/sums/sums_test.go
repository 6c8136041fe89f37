package sums

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWriteCompare(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		if err := os.WriteFile(filepath.Join(dir, "x.tar.gz"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(b, "y.json"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{a, b} {
		if err := Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(filepath.Join(a, File))
	want := "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881  x.tar.gz\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("SHA256SUMS (-want +got):\n%s", diff)
	}
	diff, err := Compare(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"+ a1fce4363854ff888cff4b8e7875d600c2682390412a8cf79b37d0b11148b0fa  y.json"}, diff); d != "" {
		t.Errorf("Compare (-want +got):\n%s", d)
	}
}
