// Package sums writes and compares SHA256SUMS, the checksums of a dist
// directory in the format `sha256sum -c` reads.
package sums

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// File is the checksum file's name.
const File = "SHA256SUMS"

// Write writes dir/SHA256SUMS over every regular file directly in dir
// (but itself), sorted by name.
func Write(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checksums: %w", err)
	}
	var b strings.Builder
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == File {
			continue
		}
		sum, err := fileSum(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, e.Name())
	}
	if err := os.WriteFile(filepath.Join(dir, File), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("checksums: %w", err)
	}
	return nil
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("checksum: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("checksum %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Compare reads dirA's and dirB's SHA256SUMS and returns the lines that
// differ ("- " only in A, "+ " only in B); none when the builds agree.
func Compare(dirA, dirB string) ([]string, error) {
	a, err := os.ReadFile(filepath.Join(dirA, File))
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(dirB, File))
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	la, lb := lines(a), lines(b)
	var diff []string
	for _, l := range la {
		if !slices.Contains(lb, l) {
			diff = append(diff, "- "+l)
		}
	}
	for _, l := range lb {
		if !slices.Contains(la, l) {
			diff = append(diff, "+ "+l)
		}
	}
	return diff, nil
}

func lines(data []byte) []string {
	var out []string
	for l := range bytes.Lines(data) {
		if s := strings.TrimSpace(string(l)); s != "" {
			out = append(out, s)
		}
	}
	return out
}
